package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// How a file is read: by the line scanner below, and by nothing else.
//
// Until issue 15 a file was read twice: this scanner checked everything that
// has a line, then go-ini (gopkg.in/ini.v1) read the values, and the two
// were compared key by key. go-ini was dropped, not the scanner, because it
// cannot say where anything is: a *ini.Key has no line number, its syntax
// errors name none (go-ini/ini#341), and it silently merges a repeated
// section or key, so every FILE:LINE message came from the scanner anyway
// and the second parse only added a way for the two to disagree. The
// scanner reads values as go-ini v1.68 did with the options pepsi gave it
// (KeyValueDelimiters "=", IgnoreContinuation, SpaceBeforeInlineComment),
// so every file means what it meant before:
//   - Only "KEY = value": a ':' does not split, so a stray "postgres://…"
//     line is an error rather than a key.
//   - A trailing backslash does not join lines (PROGRAM reports it as an
//     error rather than silently gluing the next line on).
//   - ';' or '#' starts an inline comment only after a space, as in
//     `MAX_RUNTIME = 300   ; seconds`, so a DSN password or an argument such
//     as --sep=; keeps its ';' and '#'. A value that is wholly quoted ("…"
//     or '…') keeps everything inside the quotes; the quotes are removed.
//   - A value that starts with """ or ` runs to the last such quote on the
//     line that holds the closing one, which may be a later line; it is
//     taken as it is, and the rest of that line is ignored.
//
// PROGRAM keeps its comment and its quotes: they belong to the word
// splitter (see splitWords), which also ends the command at an unquoted '#'
// or ';' that begins a word, so `PROGRAM = /bin/x 'a #b' ; comment` is
// /bin/x and "a #b".

const (
	sectionDatabase = "database"
	sectionDispatch = "pepsi-dispatch"
	sectionHTTPD    = "pepsi-httpd"
	stagePrefix     = "stage-"
)

// keys lists the keys each kind of section accepts.
var keys = map[string][]string{
	sectionDatabase: {"DSN", "WORKER_DSN"},
	sectionDispatch: {"MAX_RUNTIME", "WORKER_IDLE_TIMEOUT", "POLL_INTERVAL", "STATS_INTERVAL",
		"CONFIG_FILE", "INGRESS_CHANNEL", "SHUTDOWN_GRACE", "SPAWN_COOLDOWN", "RETENTION", "METRICS_LISTEN",
		"ORPHAN_SWEEP", "RECONNECT_MIN", "RECONNECT_MAX", "VACUUM_INTERVAL", "STAGES", "TRACING"},
	sectionHTTPD: {"WEB_CONFIG_FILE", "ACTION_USERS", "TRACE_URL"},
	stagePrefix:  {"PROGRAM", "PARALLELISM", "QUEUE_LIMIT", "MAX_MESSAGES", "RETRIES", "RETRY_DELAY", "RETRY_DELAY_MAX", "RATE", "KEY", "KEY_LIMIT", "JOIN_POLICY", "TRACE"},
}

// maxValueSize bounds a value as written (after the '=', with the comment
// on its line, or all that a """…""" value spans), in bytes. No key needs
// more (a path, PATH_MAX, is 4096 too), and a value goes into log lines
// and a worker's argv: a 2 MB PROGRAM passed every check, then failed to
// start with "argument list too long", logged in one 2 MB line.
const maxValueSize = 4096

// rawKey is a key line found by the scanner.
type rawKey struct {
	name   string
	line   int
	text   string // the value as written, without the blanks around it; or what is inside """…""" or `…`
	quoted bool   // text was inside """…""" or `…`
}

// value is the key's value as every key but PROGRAM takes it: an inline
// comment and the quotes around a wholly quoted value are removed.
func (k rawKey) value() string {
	v := k.text
	if k.quoted {
		return v
	}
	if i := commentIndex(v); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	if surrounded(v, '"') || surrounded(v, '\'') {
		v = v[1 : len(v)-1]
	}
	return v
}

// commentIndex returns where an inline comment begins in v (at the space
// before the ';' or '#'), or -1. In a value that starts with a quote, a
// comment begins only after the closing quote (\" does not close "…").
func commentIndex(v string) int {
	var quote byte
	escaped := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case quote != 0 && escaped:
			escaped = false
		case quote == '"' && c == '\\':
			escaped = true
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case i == 0 && (c == '\'' || c == '"'):
			quote = c
		case (c == ';' || c == '#') && i > 0 && v[i-1] == ' ':
			return i - 1
		}
	}
	return -1
}

// surrounded reports whether v is wholly in quotes q: q first and last, and
// nowhere between.
func surrounded(v string, q byte) bool {
	return len(v) >= 2 && v[0] == q && v[len(v)-1] == q && strings.IndexByte(v[1:], q) == len(v)-2
}

// rawSection is a section header and its keys found by the scanner.
type rawSection struct {
	name string
	kind string // sectionDatabase, sectionDispatch, sectionHTTPD, stagePrefix or schedulePrefix
	line int
	keys []rawKey
}

// Parse parses and validates the contents of a pepsi.conf; file is the name
// used in errors and stored as Path (and as the default CONFIG_FILE).
func Parse(file string, data []byte) (*Config, error) {
	secs, err := scan(file, data)
	if err != nil {
		return nil, err
	}

	c := Default()
	c.Path = file
	c.Dispatch.ConfigFile = file
	bad := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	var reconnectLine int // the later RECONNECT_MIN or RECONNECT_MAX line
	var stages *rawKey    // STAGES, checked once every stage is known
	for _, s := range secs {
		if s.kind == schedulePrefix {
			if err := c.addSchedule(file, s); err != nil {
				return nil, err
			}
			continue
		}
		var st *Stage
		if s.kind == stagePrefix {
			c.Stages = append(c.Stages, newStage(strings.TrimPrefix(s.name, stagePrefix), s.line))
			st = &c.Stages[len(c.Stages)-1]
		}
		for _, k := range s.keys {
			var msg string
			switch s.kind {
			case sectionDatabase:
				if k.name == "WORKER_DSN" {
					c.WorkerDSN = k.value()
				} else {
					c.DSN = k.value()
				}
			case sectionDispatch:
				if k.name == "STAGES" {
					stages = &k
					continue
				}
				msg = setDispatch(&c.Dispatch, k.name, k.value())
				if strings.HasPrefix(k.name, "RECONNECT_") {
					reconnectLine = k.line
				}
			case sectionHTTPD:
				msg = setHTTPD(&c.HTTPD, file, k.name, k.value(), k.line)
			case stagePrefix:
				if k.name == "PROGRAM" {
					msg = setProgram(st, k.text)
				} else {
					msg = setStage(st, k.name, k.value())
				}
				if k.name == "KEY_LIMIT" {
					st.KeyLine = k.line
				}
			}
			if msg != "" {
				return nil, bad(k.line, "%s", msg)
			}
		}
		if st != nil && st.Program == nil {
			return nil, bad(s.line, "no PROGRAM in [%s]", s.name)
		}
		if st != nil && st.KeyLine > 0 && !st.Keyed() {
			return nil, bad(st.KeyLine, "KEY_LIMIT without KEY in [%s] (KEY = header:NAME names what it limits)", s.name)
		}
	}
	if d := &c.Dispatch; d.ReconnectMin > d.ReconnectMax {
		return nil, bad(reconnectLine, "RECONNECT_MIN (%v) is longer than RECONNECT_MAX (%v)", d.ReconnectMin, d.ReconnectMax)
	}
	if stages != nil {
		names, msg := c.parseStages(stages.value())
		if msg != "" {
			return nil, bad(stages.line, "STAGES: %s", msg)
		}
		c.StageSet, c.StageSetLine = names, stages.line
	}
	if err := c.checkSchedules(file); err != nil {
		return nil, err
	}
	if c.Dispatch.ConfigFile == "" {
		c.Dispatch.ConfigFile = file
	}
	return c, nil
}

// lineReader hands out the lines of a file: each with its '\n', and, when
// the file ends with '\n', one last empty line.
type lineReader struct {
	data []byte
	eof  bool
	n    int // number of the line last returned
}

// next returns the next line.
func (r *lineReader) next() []byte {
	r.n++
	i := bytes.IndexByte(r.data, '\n')
	if i < 0 {
		line := r.data
		r.data, r.eof = nil, true
		return line
	}
	line := r.data[:i+1]
	r.data = r.data[i+1:]
	return line
}

// readValue reads the value of a key whose line goes on with rest after the
// '=', and the lines after it that a """…""" or `…` value spans. unclosed
// is the quote that never closes, if any.
func (r *lineReader) readValue(rest []byte) (k rawKey, unclosed string) {
	v := bytes.TrimLeftFunc(rest, unicode.IsSpace)
	var q []byte
	switch {
	case len(v) > 3 && bytes.HasPrefix(v, []byte(`"""`)):
		q = v[:3]
	case len(v) > 0 && v[0] == '`':
		q = v[:1]
	default:
		return rawKey{text: string(bytes.TrimSpace(v))}, ""
	}
	text := v[len(q):]
	if i := bytes.LastIndex(text, q); i >= 0 {
		return rawKey{text: string(text[:i]), quoted: true}, ""
	}
	buf := bytes.Clone(text)
	for {
		more := r.next()
		if i := bytes.LastIndex(more, q); i >= 0 {
			return rawKey{text: string(append(buf, more[:i]...)), quoted: true}, ""
		}
		buf = append(buf, more...)
		if r.eof {
			return rawKey{}, string(q)
		}
	}
}

// stripBOM removes leading byte order marks (UTF-8, UTF-16 BE and LE).
func stripBOM(d []byte) []byte {
	for len(d) >= 2 {
		switch {
		case d[0] == 0xFE && d[1] == 0xFF, d[0] == 0xFF && d[1] == 0xFE:
			d = d[2:]
		case d[0] == 0xEF && d[1] == 0xBB && len(d) >= 3 && d[2] == 0xBF:
			d = d[3:]
		default:
			return d
		}
	}
	return d
}

// scan reads the file line by line into its sections and keys, and checks
// everything that has a line: syntax, section names, key names, duplicates.
func scan(file string, data []byte) ([]rawSection, error) {
	r := lineReader{data: stripBOM(data)}
	bad := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	var secs []rawSection
	seen := map[string]int{}
	for !r.eof {
		t := bytes.TrimLeftFunc(r.next(), unicode.IsSpace)
		n := r.n
		if len(t) == 0 || t[0] == '#' || t[0] == ';' {
			continue
		}
		if t[0] == '[' {
			// The name runs to the last ']'; the rest of the line may only
			// be a comment.
			end := bytes.LastIndexByte(t, ']')
			if end < 0 {
				return nil, bad(n, "unclosed section header %q", bytes.TrimSpace(t))
			}
			name := string(t[1:end])
			if rest := bytes.TrimSpace(t[end+1:]); len(rest) > 0 && rest[0] != '#' && rest[0] != ';' {
				return nil, bad(n, "unexpected %q after [%s]", rest, name)
			}
			kind, msg := sectionKind(name)
			if msg != "" {
				return nil, bad(n, "%s", msg)
			}
			if first, dup := seen[name]; dup {
				return nil, bad(n, "duplicate section [%s] (first at line %d)", name, first)
			}
			seen[name] = n
			secs = append(secs, rawSection{name: name, kind: kind, line: n})
			continue
		}
		eq := bytes.IndexByte(t, '=')
		if eq < 0 {
			return nil, bad(n, "want KEY = value, a [section] header or a comment, not %q", bytes.TrimSpace(t))
		}
		name := string(bytes.TrimSpace(t[:eq]))
		if name == "" {
			return nil, bad(n, "missing key name before '='")
		}
		if len(secs) == 0 {
			return nil, bad(n, "key %q outside any section (put it under [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])", name)
		}
		s := &secs[len(secs)-1]
		if msg := checkKey(s, name); msg != "" {
			return nil, bad(n, "%s", msg)
		}
		k, unclosed := r.readValue(t[eq+1:])
		if unclosed != "" {
			return nil, bad(n, "%s: no closing %s for the value", name, unclosed)
		}
		if len(k.text) > maxValueSize {
			return nil, bad(n, "%s: value of %d bytes in [%s] (want at most %d)", name, len(k.text), s.name, maxValueSize)
		}
		k.name, k.line = name, n
		s.keys = append(s.keys, k)
	}
	return secs, nil
}

// sectionKind classifies a section name, or says what is wrong with it.
func sectionKind(name string) (kind, msg string) {
	switch {
	case name == sectionDatabase, name == sectionDispatch, name == sectionHTTPD:
		return name, ""
	case strings.HasPrefix(name, stagePrefix):
		s := name[len(stagePrefix):]
		if err := protocol.CheckStage(s); err != nil {
			return "", fmt.Sprintf("bad stage name %q in [%s] (%v)", s, name, err)
		}
		return stagePrefix, ""
	case strings.HasPrefix(name, schedulePrefix):
		return scheduleKind(name)
	}
	return "", fmt.Sprintf("unknown section [%s] (want [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])", name)
}

// checkKey says what is wrong with key name in section s, if anything.
func checkKey(s *rawSection, name string) string {
	known := false
	for _, k := range keys[s.kind] {
		if k == name {
			known = true
			break
		}
	}
	if !known {
		for _, k := range keys[s.kind] {
			if strings.EqualFold(k, name) {
				return fmt.Sprintf("unknown key %q in [%s] (did you mean %q? keys are upper case)", name, s.name, k)
			}
		}
		return fmt.Sprintf("unknown key %q in [%s]", name, s.name)
	}
	for _, k := range s.keys {
		if k.name == name {
			return fmt.Sprintf("duplicate key %q in [%s] (first at line %d)", name, s.name, k.line)
		}
	}
	return ""
}

// setDispatch sets one [pepsi-dispatch] key, or says what is wrong.
func setDispatch(d *Dispatch, key, v string) string {
	switch key {
	case "MAX_RUNTIME":
		return setDuration(&d.MaxRuntime, key, v, false)
	case "WORKER_IDLE_TIMEOUT":
		return setDuration(&d.WorkerIdleTimeout, key, v, false)
	case "POLL_INTERVAL":
		return setDuration(&d.PollInterval, key, v, false)
	case "STATS_INTERVAL":
		return setDuration(&d.StatsInterval, key, v, false)
	case "SHUTDOWN_GRACE":
		return setDuration(&d.ShutdownGrace, key, v, false)
	case "SPAWN_COOLDOWN":
		return setDuration(&d.SpawnCooldown, key, v, false)
	case "RETENTION":
		return setDuration(&d.Retention, key, v, true)
	case "ORPHAN_SWEEP":
		return setDuration(&d.OrphanSweep, key, v, false)
	case "RECONNECT_MIN":
		return setDuration(&d.ReconnectMin, key, v, false)
	case "RECONNECT_MAX":
		return setDuration(&d.ReconnectMax, key, v, false)
	case "VACUUM_INTERVAL":
		return setDuration(&d.VacuumInterval, key, v, true)
	case "TRACING":
		return setTracing(d, key, v)
	case "CONFIG_FILE":
		d.ConfigFile = v // "" keeps the default: the file loaded
	case "INGRESS_CHANNEL":
		if !channelRE.MatchString(v) {
			return fmt.Sprintf("%s: bad channel name %q (want a letter or '_', then letters, digits or '_'; at most 63)", key, v)
		}
		d.IngressChannel = v
	case "METRICS_LISTEN":
		if v != "" {
			if msg := checkListen(v); msg != "" {
				return fmt.Sprintf("%s: %s", key, msg)
			}
		}
		d.MetricsListen = v
	}
	return ""
}

// checkListen says what is wrong with a listen address, if anything: it
// must be HOST:PORT or :PORT, the port a number from 0 (any free port, which
// the dispatcher logs) to 65535 or a service name that resolves (from
// /etc/services), so that a port the listener cannot take is refused here,
// at its line, rather than when the dispatcher starts (exit 1, no line).
func checkListen(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Sprintf("bad address %q (want HOST:PORT or :PORT, or nothing for off)", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		if _, err := strconv.ParseInt(port, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			return fmt.Sprintf("port %s out of range in %q (want 0 to 65535)", port, addr)
		}
		return fmt.Sprintf("unknown port %q in %q (want a number from 0 to 65535 or a service name)", port, addr)
	}
	return ""
}

// setStage sets one [stage-NAME] key but PROGRAM, or says what is wrong.
func setStage(st *Stage, key, v string) string {
	switch key {
	case "RETRY_DELAY":
		return setDuration(&st.RetryDelay, key, v, false)
	case "RETRY_DELAY_MAX":
		return setDuration(&st.RetryMax, key, v, false)
	case "RATE":
		return setRate(&st.Rate, key, v)
	case "KEY":
		return setKey(st, key, v)
	case "TRACE":
		return setTraceLink(st, key, v)
	case "JOIN_POLICY":
		switch JoinPolicy(v) {
		case JoinFail, JoinAll:
			st.JoinPolicy = JoinPolicy(v)
			return ""
		}
		return fmt.Sprintf("%s: %q is not a policy (want fail or all)", key, v)
	case "RETRIES":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Sprintf("%s: bad number %q (want an integer >= 0)", key, v)
		}
		st.Retries = n
		return ""
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil && strings.Contains(err.Error(), "out of range"):
		return fmt.Sprintf("%s: %q is out of range (want an integer >= 1)", key, v)
	case err != nil:
		return fmt.Sprintf("%s: bad number %q (want an integer >= 1)", key, v)
	case n < 1:
		return fmt.Sprintf("%s: must be an integer >= 1, not %q", key, v)
	}
	switch key {
	case "PARALLELISM":
		st.Parallelism = n
	case "QUEUE_LIMIT":
		st.QueueLimit = n
	case "MAX_MESSAGES":
		st.MaxMessages = n
	case "KEY_LIMIT":
		st.KeyLimit = n
	}
	return ""
}

// setProgram sets a stage's PROGRAM from its raw text, or says what is wrong.
func setProgram(st *Stage, raw string) string {
	if strings.IndexByte(raw, 0) >= 0 {
		return "PROGRAM: contains a NUL byte"
	}
	words, end, err := splitWords(raw)
	if err != nil {
		return fmt.Sprintf("PROGRAM: %v in %q", err, raw)
	}
	if len(words) == 0 {
		return fmt.Sprintf("PROGRAM is empty in [%s%s]", stagePrefix, st.Name)
	}
	// The first word is what is run: "" or blanks in quotes make a word,
	// but no program, and failed only when a worker was started ("exec: no
	// command"); an empty argument after it is fine.
	if strings.TrimSpace(words[0]) == "" {
		return fmt.Sprintf("PROGRAM: the program to run (the first word, %q) is empty in [%s%s]", words[0], stagePrefix, st.Name)
	}
	st.Program = words
	st.ProgramText = strings.TrimSpace(raw[:end])
	return ""
}
