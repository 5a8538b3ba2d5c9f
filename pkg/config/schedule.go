package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// Periodic enqueue: a [schedule-NAME] section enqueues one message at
// STAGE at every occurrence (slot) of its CRON expression or its EVERY
// interval. The dispatcher that holds the janitor lock does it (see
// pkg/dispatch/schedule.go); here are the section's keys and its slots.
//
// The slots are the same on every host and at every start, so that any
// dispatcher that takes the janitor role over enqueues the very slots the
// last one would have: CRON is read in UTC unless it begins with TZ=ZONE
// (or CRON_TZ=ZONE), and EVERY's slots are the multiples of the interval
// since the Unix epoch (EVERY = 5m: :00, :05, :10 … of every hour, UTC).
// The expression is parsed by github.com/robfig/cron/v3: five fields
// (minute hour day-of-month month day-of-week), six with seconds first,
// or a descriptor (@yearly, @monthly, @weekly, @daily, @midnight, @hourly).

const schedulePrefix = "schedule-"

// scheduleKeys are the keys of a [schedule-NAME] section.
var scheduleKeys = []string{"CRON", "EVERY", "STAGE", "PAYLOAD", "HEADERS", "PRIORITY"}

func init() { keys[schedulePrefix] = scheduleKeys }

// cronParser reads CRON: five fields, or six with seconds first, or a
// descriptor.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule holds one [schedule-NAME] section.
type Schedule struct {
	Name      string            // the part after "schedule-": 1 to 63 letters, digits, '_', '-' or '.'
	Cron      string            // CRON as written; "" with EVERY
	Every     time.Duration     // EVERY, whole seconds; 0 with CRON
	Stage     string            // STAGE: a configured stage
	Payload   []byte            // PAYLOAD, default empty
	Headers   map[string]string // HEADERS, a JSON object of strings; default none
	Priority  int32             // PRIORITY, default 0: lower is claimed first
	Line      int               // line of the [schedule-NAME] header
	StageLine int               // line of STAGE
	spec      cron.Schedule     // CRON parsed
}

// Spec is how the schedule is written: "CRON */5 * * * *" or "EVERY 5m0s".
func (s *Schedule) Spec() string {
	if s.spec != nil {
		return "CRON " + s.Cron
	}
	return "EVERY " + s.Every.String()
}

// Next returns the schedule's first slot after t; the zero time when there
// is none within five years (a CRON of February 30).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.spec == nil {
		return s.Latest(t).Add(s.Every)
	}
	return s.spec.Next(t.UTC())
}

// Latest returns the schedule's last slot at or before t; the zero time
// when there is none within about five years before it.
func (s *Schedule) Latest(t time.Time) time.Time {
	if s.spec == nil {
		e := int64(s.Every / time.Second)
		u := t.Unix() // rounds down, also before 1970
		return time.Unix(u-((u%e)+e)%e, 0).UTC()
	}
	// The slots are whole seconds. Find a point p before t with a slot
	// in (p, t], then narrow it down: the latest slot is Next(p) for the
	// last p (in seconds) whose Next is still at or before t.
	t = t.UTC().Truncate(time.Second)
	var lo time.Time
	for _, back := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 366 * 24 * time.Hour} {
		p := t.Add(-back)
		if n := s.spec.Next(p); !n.IsZero() && !n.After(t) {
			lo = p
			break
		}
	}
	if lo.IsZero() {
		return time.Time{}
	}
	hi := t // Next(hi) is after t
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if n := s.spec.Next(mid); !n.IsZero() && !n.After(t) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return s.spec.Next(lo)
}

// scheduleKind checks the NAME of [schedule-NAME].
func scheduleKind(name string) (kind, msg string) {
	s := name[len(schedulePrefix):]
	if err := protocol.CheckStage(s); err != nil {
		return "", fmt.Sprintf("bad schedule name %q in [%s] (%v)", s, name, err)
	}
	return schedulePrefix, ""
}

// addSchedule reads a [schedule-NAME] section into c.Schedules. Whether
// its STAGE is configured is checked by checkSchedules, once every stage
// is known.
func (c *Config) addSchedule(file string, sec rawSection) error {
	bad := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	s := Schedule{Name: strings.TrimPrefix(sec.name, schedulePrefix), Line: sec.line}
	var when *rawKey // the CRON or EVERY line read first
	for _, k := range sec.keys {
		v := k.value()
		var msg string
		switch k.name {
		case "CRON", "EVERY":
			if when != nil {
				return bad(k.line, "%s: give CRON or EVERY, not both (%s at line %d)", k.name, when.name, when.line)
			}
			when = &k
			if k.name == "CRON" {
				msg = s.setCron(v)
			} else {
				msg = s.setEvery(v)
			}
		case "STAGE":
			if err := protocol.CheckStage(v); err != nil {
				msg = fmt.Sprintf("bad stage name %q (%v)", v, err)
			}
			s.Stage, s.StageLine = v, k.line
		case "PAYLOAD":
			s.Payload = []byte(v)
		case "HEADERS":
			msg = s.setHeaders(v)
		case "PRIORITY":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				msg = fmt.Sprintf("bad priority %q (want an integer from %d to %d; lower is claimed first)", v, math.MinInt32, math.MaxInt32)
			}
			s.Priority = int32(n)
		}
		if msg != "" {
			return bad(k.line, "%s: %s", k.name, msg)
		}
	}
	if when == nil {
		return bad(sec.line, "no CRON or EVERY in [%s] (give one: CRON = */5 * * * *, or EVERY = 5m)", sec.name)
	}
	if s.StageLine == 0 {
		return bad(sec.line, "no STAGE in [%s] (the stage its messages are enqueued at)", sec.name)
	}
	c.Schedules = append(c.Schedules, s)
	return nil
}

// checkSchedules refuses a schedule whose STAGE has no [stage-NAME]
// section: its messages would wait for a stage nobody runs.
func (c *Config) checkSchedules(file string) error {
	for _, s := range c.Schedules {
		if _, ok := c.Stage(s.Stage); !ok {
			return &Error{File: file, Line: s.StageLine, Msg: fmt.Sprintf("STAGE: unknown stage %q (no [stage-%s] section)", s.Stage, s.Stage)}
		}
	}
	return nil
}

// setCron parses CRON, or says what is wrong with it.
func (s *Schedule) setCron(v string) (msg string) {
	const want = "want 5 fields (minute hour day-of-month month day-of-week) such as */5 * * * *, 6 with seconds first, or @hourly, @daily, @weekly, @monthly, @yearly; TZ=ZONE first for another zone than UTC"
	rest := v
	if strings.HasPrefix(v, "TZ=") || strings.HasPrefix(v, "CRON_TZ=") {
		// robfig/cron slices the zone up to the first blank: none panics.
		zone, r, ok := strings.Cut(v, " ")
		if !ok || strings.TrimSpace(r) == "" {
			return fmt.Sprintf("bad cron expression %q: nothing after the time zone (%s)", v, want)
		}
		if msg := checkZone(zone); msg != "" {
			return fmt.Sprintf("bad cron expression %q: %s", v, msg)
		}
		rest = strings.TrimSpace(r)
	}
	if strings.HasPrefix(rest, "@every") {
		return fmt.Sprintf("bad cron expression %q: use EVERY = DURATION for an interval", v)
	}
	defer func() { // the parser is not ours: a panic is a bad expression too
		if r := recover(); r != nil {
			msg = fmt.Sprintf("bad cron expression %q (%s)", v, want)
		}
	}()
	spec, err := cronParser.Parse(v)
	if err != nil {
		return fmt.Sprintf("bad cron expression %q: %v (%s)", v, err, want)
	}
	s.Cron, s.spec = v, zoned(spec, rest)
	if s.Next(time.Now()).IsZero() {
		return fmt.Sprintf("%q never comes (no time matches it within five years)", v)
	}
	return ""
}

// checkZone says what is wrong with CRON's TZ=ZONE (or CRON_TZ=ZONE), if
// anything. Local and the empty zone are refused: robfig/cron reads both as
// the zone of the time it is given, which is UTC here, and a host's own
// zone would differ between the dispatchers that may take the janitor
// role over and doctor, so that they would disagree on the slots. An
// unknown zone is left to the parser, which names it.
func checkZone(tz string) string {
	prefix, zone, _ := strings.Cut(tz, "=")
	switch zone {
	case "":
		return fmt.Sprintf("no zone after %s= (name one of the tz database, such as %[1]s=Europe/Berlin, or leave %[1]s= out for UTC)", prefix)
	case "Local":
		return fmt.Sprintf("%s is the zone of whichever host reads it, and the hosts that run dispatchers may differ (name the zone, such as %s=Asia/Tokyo)", tz, prefix)
	}
	return ""
}

// setEvery parses EVERY, or says what is wrong with it: a duration of
// whole seconds, at least one.
func (s *Schedule) setEvery(v string) string {
	if msg := setDuration(&s.Every, "EVERY", v, false); msg != "" {
		return strings.TrimPrefix(msg, "EVERY: ")
	}
	if s.Every%time.Second != 0 {
		return fmt.Sprintf("must be whole seconds, not %q", v)
	}
	return ""
}

// setHeaders parses HEADERS, a JSON object whose values are strings, or
// says what is wrong with it.
func (s *Schedule) setHeaders(v string) string {
	const want = `want a JSON object of strings, such as {"source": "cron"}`
	if msg := storableJSON(v); msg != "" {
		return msg + ": PostgreSQL's jsonb cannot hold it"
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(v), &obj); err != nil || obj == nil {
		return fmt.Sprintf("bad JSON object %s (%s)", v, want)
	}
	h := make(map[string]string, len(obj))
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		str, ok := obj[k].(string)
		if !ok {
			return fmt.Sprintf("header %q is not a string in %s (%s)", k, v, want)
		}
		h[k] = str
	}
	s.Headers = h
	return ""
}

// storableJSON says why PostgreSQL's jsonb would refuse the text of the
// JSON v, or silently hold something else than it says, if it would: bytes
// that are not UTF-8 (encoding/json would turn them into U+FFFD), the
// escape \u0000 (jsonb's strings are text, which has no NUL: SQLSTATE
// 22P05) and half a surrogate pair (\ud800 alone is no character). A raw
// control character is not valid JSON, and is left to the decoder.
func storableJSON(v string) string {
	for i := 0; i < len(v); {
		r, n := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("byte %#x at byte %d is not UTF-8", v[i], i+1)
		}
		i += n
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' || i+1 == len(v) {
			continue
		}
		if v[i+1] != 'u' {
			i++ // \\, \" and the like: the next byte is escaped
			continue
		}
		r, ok := hex4(v[i+2:])
		switch {
		case !ok: // not JSON: the decoder says so
		case r == 0:
			return fmt.Sprintf(`\u0000 (NUL) at byte %d`, i+1)
		case utf16.IsSurrogate(r):
			lo, ok := hex4(strings.TrimPrefix(v[i+6:], `\u`))
			if r >= 0xdc00 || !strings.HasPrefix(v[i+6:], `\u`) || !ok || lo < 0xdc00 || lo > 0xdfff {
				return fmt.Sprintf(`%s at byte %d is half a surrogate pair`, v[i:i+6], i+1)
			}
			i += 6 // the pair's low half
		}
		i += 5
	}
	return ""
}

// hex4 reads the 4 hex digits at the start of s.
func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:4], 16, 16)
	return rune(n), err == nil
}
