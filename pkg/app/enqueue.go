package app

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
	ptrace "github.com/pepsi-dev/pepsi/pkg/trace"
)

// progressMin is the number of messages from which enqueue shows its
// progress on a terminal.
const progressMin = 10000

// maxKeyBytes is the longest --key, in bytes. The key goes into the
// unique btree index state_dedup, whose entries may take at most a third
// of a page (2704 bytes, compressed when that helps, which it does not for
// a random key): a longer key failed with the server's raw "index row
// size" error. 1024 leaves room, and pepsi.enqueue() draws the line there
// too (migration 013).
const maxKeyBytes = 1024

func enqueueCommand() *cli.Command {
	headers := &headerList{}
	return &cli.Command{
		Name:      "enqueue",
		Usage:     "put messages into the queue of a stage",
		ArgsUsage: "[FILE...]",
		UsageText: "pepsi enqueue --stage NAME [--header KEY=VALUE]... [--priority N] [--key K] [--at TIME | --delay DURATION] [--lines] [--quiet] [--verbose] [FILE...]",
		Description: "Each FILE becomes one message, its bytes the payload; \"-\" or no FILE\n" +
			"reads standard input. With --lines, every non-empty line of the input is\n" +
			"a message instead (without its newline). All input is read first, then\n" +
			"inserted with COPY in one transaction: either every message is enqueued\n" +
			"or none. The new message ids are printed in input order, one per line.\n" +
			"With --key, the one message is not created while a message with that key\n" +
			"is unfinished (pending, running, paused or held): its id is printed instead.\n" +
			"With --at or --delay the messages are scheduled: they wait as paused and\n" +
			"are not claimed before that time.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "stage", Aliases: []string{"s"}, Usage: "enqueue at stage `NAME` (a [stage-NAME] of the configuration)"},
			&cli.GenericFlag{Name: "header", Value: headers, Usage: "give every message the header `KEY=VALUE` (repeatable; short: -H)"},
			&cli.GenericFlag{Name: "H", Value: headers, Hidden: true},
			&cli.BoolFlag{Name: "lines", Aliases: []string{"l"}, DisableDefaultText: true, Usage: "one message per input line; empty lines are skipped"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, DisableDefaultText: true, Usage: "print only \"enqueued N messages\" (or \"1 message\"), not the ids"},
			&cli.StringFlag{Name: "priority", Usage: "give the messages priority `N` (lower is claimed first; default 0)"},
			&cli.StringFlag{Name: "key", Usage: "deduplication key `K`: no new message while one with K is unfinished (one message only)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, DisableDefaultText: true, Usage: "with --key: say on standard error whether the message is new"},
			&cli.StringFlag{Name: "at", Usage: "schedule the messages: not claimed before `TIME` (RFC 3339, or local YYYY-MM-DD HH:MM[:SS])"},
			&cli.StringFlag{Name: "delay", Usage: "schedule the messages `DURATION` from now (seconds, or 90s, 15m, 2h, 1d)"},
			&cli.StringFlag{Name: "traceparent", EnvVars: []string{ptrace.EnvParent}, Usage: "the messages' W3C trace context `TRACEPARENT` (headers traceparent and tracestate: their passes are traced in that trace)"},
			&cli.StringFlag{Name: "tracestate", EnvVars: []string{ptrace.EnvState}, Usage: "with --traceparent: its W3C `TRACESTATE`"},
		},
		Action: enqueue,
	}
}

func enqueue(c *cli.Context) error {
	stage := c.String("stage")
	if stage == "" {
		return usage("--stage is required")
	}
	var flags []string
	if h, ok := c.Generic("header").(*headerList); ok {
		flags = *h
	}
	headers, err := parseHeaders(flags)
	if err != nil {
		return err
	}
	if headers, err = traceHeaders(c, headers); err != nil {
		return err
	}
	prio, err := parsePriorityFlag(c)
	if err != nil {
		return err
	}
	key, keyed := c.String("key"), c.IsSet("key")
	if keyed && key == "" {
		return usage("--key is empty")
	}
	if err := checkUTF8("key", key); err != nil {
		return err
	}
	if len(key) > maxKeyBytes {
		return usage("--key of %d bytes: want at most %d bytes", len(key), maxKeyBytes)
	}
	if keyed && c.Bool("lines") {
		return usage("--key names one message; --lines makes many")
	}
	runAt, err := parseRunAt(c, time.Now())
	if err != nil {
		return err
	}
	files := c.Args().Slice()
	if err := checkFiles(files); err != nil {
		return err
	}
	if keyed && len(files) > 1 {
		return usage("--key names one message; %d FILEs make %d", len(files), len(files))
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if err := checkStage(cfg, stage); err != nil {
		return err
	}
	if _, err := parseDSN(cfg); err != nil {
		return err
	}
	payloads, err := readPayloads(files, c.App.Reader, c.Bool("lines"))
	if err != nil {
		return err
	}

	db, err := queue.Open(c.Context, cfg.DSN, queue.Options{App: commandName(c), MaxConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.CheckSchema(c.Context); err != nil {
		return err
	}
	if keyed {
		return enqueueKeyed(c, db, queue.Keyed{Stage: stage, Payload: payloads[0], Headers: headers, Priority: deref(prio), Key: key, RunAt: runAt})
	}
	bulk := queue.Bulk{Stage: stage, Headers: headers, Payloads: payloads, Priority: deref(prio), RunAt: runAt}
	progress := len(payloads) >= progressMin && isTerminal(c.App.ErrWriter)
	if progress {
		bulk.Progress = func(n int) {
			fmt.Fprintf(c.App.ErrWriter, "\rpepsi enqueue: %d/%d messages", n, len(payloads))
		}
	}
	ids, err := db.EnqueueBulk(c.Context, bulk)
	if progress {
		fmt.Fprintln(c.App.ErrWriter)
	}
	if err != nil {
		return fmt.Errorf("nothing enqueued: %w", err)
	}

	out := bufio.NewWriterSize(c.App.Writer, 64<<10)
	if c.Bool("quiet") {
		fmt.Fprintf(out, "enqueued %s\n", plural(int64(len(ids)), "message"))
	} else {
		var b []byte
		for _, id := range ids {
			b = strconv.AppendInt(b[:0], id, 10)
			b = append(b, '\n')
			out.Write(b) //nolint:errcheck // Flush reports it
		}
	}
	return out.Flush()
}

// enqueueKeyed enqueues one message with a deduplication key and prints
// its id, new or not.
func enqueueKeyed(c *cli.Context, db *queue.DB, m queue.Keyed) error {
	id, created, err := db.EnqueueKeyed(c.Context, m)
	if err != nil {
		return fmt.Errorf("nothing enqueued: %w", err)
	}
	if c.Bool("verbose") {
		if created {
			fmt.Fprintf(c.App.ErrWriter, "pepsi enqueue: message %d is new (key %q)\n", id, m.Key)
		} else {
			fmt.Fprintf(c.App.ErrWriter, "pepsi enqueue: key %q is held by unfinished message %d: nothing enqueued\n", m.Key, id)
		}
	}
	if c.Bool("quiet") {
		n := int64(0)
		if created {
			n = 1
		}
		_, err = fmt.Fprintf(c.App.Writer, "enqueued %s\n", plural(n, "message"))
		return err
	}
	_, err = fmt.Fprintln(c.App.Writer, id)
	return err
}

// localLayouts are the local times --at takes, besides RFC 3339.
var localLayouts = []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02T15:04"}

// parseRunAt reads --at and --delay: when the messages run (zero: now).
// A time that is not after now, a negative delay, or both flags, are usage
// errors. A zero delay is no schedule.
func parseRunAt(c *cli.Context, now time.Time) (time.Time, error) {
	at, delay := c.String("at"), c.String("delay")
	switch {
	case c.IsSet("at") && c.IsSet("delay"):
		return time.Time{}, usage("--at and --delay both say when: give one")
	case c.IsSet("at"):
		t, err := parseTime(at)
		if err != nil {
			return time.Time{}, usage("--at %q: want RFC 3339 (2026-12-24T18:00:00+01:00) or a local time YYYY-MM-DD HH:MM[:SS]", at)
		}
		if !t.After(now) {
			return time.Time{}, usage("--at %q: that time is past (now %s)", at, fmtTime(now))
		}
		return t, nil
	case c.IsSet("delay"):
		if strings.HasPrefix(strings.TrimSpace(delay), "-") {
			return time.Time{}, usage("--delay %q: a delay must not be negative", delay)
		}
		d, err := config.ParseAge(strings.TrimSpace(delay))
		if err != nil {
			return time.Time{}, usage("--delay %q: want seconds or a duration such as 90s, 15m, 2h or 1d", delay)
		}
		if d == 0 {
			return time.Time{}, nil
		}
		return now.Add(d), nil
	}
	return time.Time{}, nil
}

// parseTime reads RFC 3339, or a local time without a zone (see inZone).
func parseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, l := range localLayouts {
		if w, err := time.Parse(l, s); err == nil {
			return inZone(w, time.Local), nil
		}
	}
	return time.Time{}, errors.New("not a time")
}

// inZone is the instant at which the clocks of loc first show the wall
// time w (its fields, read in UTC). A wall time in the hour skipped when
// the clocks go forward is read with the offset from before the skip, as
// PostgreSQL reads it: 02:30 on the night New York goes from 02:00 EST to
// 03:00 EDT is 03:30 EDT, after the time asked and never before it (the
// message is "not handed out before TIME"). One the clocks show twice,
// when they go back, is the first. time.Date leaves both choices open: it
// took 01:30 EST in the gap in America/New_York, and the second 02:30 in
// Europe/Berlin's autumn.
func inZone(w time.Time, loc *time.Location) time.Time {
	t := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	start, _ := t.ZoneBounds()
	_, prev := start.Add(-time.Nanosecond).Zone() // the offset before t's zone period
	if wall(t).Equal(w) {
		if first := w.Add(-time.Duration(prev) * time.Second); first.Before(start) && wall(first.In(loc)).Equal(w) {
			return first.In(loc) // the first of two
		}
		return t
	}
	// In the skipped hour: the offset before the skip is t's if t is
	// before it, else the one before t's zone period began.
	_, off := t.Zone()
	if wall(t).After(w) {
		off = prev
	}
	return w.Add(-time.Duration(off) * time.Second).In(loc)
}

// wall is t's clock reading in its zone, as a time in UTC.
func wall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// deref returns *p, or 0 for nil.
func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// headerList collects the values of a repeated --header as given (no
// splitting at commas). --header and -H are two flags sharing one list, so
// that they can be mixed (urfave/cli refuses two forms of one flag).
type headerList []string

func (h *headerList) String() string     { return "" }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// parseHeaders turns KEY=VALUE flags into a map. The value may contain
// '=' and ','; a key may be given once.
func parseHeaders(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	h := make(map[string]string, len(flags))
	for _, f := range flags {
		if err := checkUTF8("header", f); err != nil {
			return nil, err
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, usage("--header %q: want KEY=VALUE", f)
		}
		if _, dup := h[k]; dup {
			return nil, usage("--header %q: header %q given twice", f, k)
		}
		h[k] = v
	}
	return h, nil
}

// checkFiles rejects what flag parsing let through as a file name: a flag
// after the first FILE, and standard input named twice.
func checkFiles(files []string) error {
	stdin := 0
	for _, f := range files {
		switch {
		case f == "-":
			if stdin++; stdin > 1 {
				return usage("standard input (\"-\") given more than once")
			}
		case strings.HasPrefix(f, "-"):
			return usage("%q after a FILE: flags come first (a file named so: ./%s)", f, f)
		}
	}
	return nil
}

// checkStage requires a configured [stage-NAME]. A configuration without
// any stage (only a DSN, say from PEPSI_DSN on a machine that just feeds
// the queue) accepts any well-formed stage name.
func checkStage(cfg *config.Config, stage string) error {
	if err := protocol.CheckStage(stage); err != nil {
		return usage("--stage %q: bad stage name (%v)", stage, err)
	}
	if len(cfg.Stages) == 0 {
		return nil
	}
	if _, ok := cfg.Stage(stage); !ok {
		return invalid("--stage %q: no [stage-%s] in %s", stage, stage, cfg.Path)
	}
	return nil
}

// readPayloads reads every input before anything is inserted, so that an
// unreadable or empty input enqueues nothing. Without lines, each input is
// one message and an empty one is refused; with lines, each non-empty line
// is one (the newline removed, nothing else), and no line at all is refused.
func readPayloads(files []string, stdin io.Reader, lines bool) ([][]byte, error) {
	if len(files) == 0 {
		files = []string{"-"}
	}
	var payloads [][]byte
	for _, name := range files {
		data, err := readInput(name, stdin)
		if err != nil {
			return nil, err
		}
		if !lines {
			if len(data) == 0 {
				return nil, fmt.Errorf("%s: empty input, nothing enqueued", inputName(name))
			}
			payloads = append(payloads, data)
			continue
		}
		for len(data) > 0 {
			line := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				line, data = data[:i], data[i+1:]
			} else {
				data = nil
			}
			if len(line) > 0 {
				payloads = append(payloads, line[:len(line):len(line)])
			}
		}
	}
	if len(payloads) == 0 {
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = inputName(f)
		}
		return nil, fmt.Errorf("no lines in %s, nothing enqueued", strings.Join(names, ", "))
	}
	return payloads, nil
}

func inputName(name string) string {
	if name == "-" {
		return "standard input"
	}
	return name
}

// readInput reads a file, or stdin for "-"; its error names the file.
func readInput(name string, stdin io.Reader) ([]byte, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: %v, nothing enqueued", inputName(name), err)
	}
	return data, nil
}

// isTerminal reports whether w is a terminal (a character device; /dev/null
// is one too, which does no harm: progress written there is lost).
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
