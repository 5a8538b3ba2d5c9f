package app

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func queueShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show messages: state, headers, payload size",
		ArgsUsage: "ID...",
		UsageText: "pepsi queue show [--json] ID...\npepsi queue show --payload ID\npepsi queue show --result ID",
		Description: "Prints each message's queue state, its headers and the size of its\n" +
			"payload, a blank line between messages; with --json, one JSON object per\n" +
			"line. In a graph, also its parent (id, stage, status), its children\n" +
			"counted by status with the ids of a few open and failed ones, and the\n" +
			"size and start of the result its stage left. With --payload, writes the\n" +
			"raw payload of one message to standard output and nothing else; with\n" +
			"--result, its raw result. Every ID must exist, or nothing is printed.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "payload", Aliases: []string{"p"}, DisableDefaultText: true, Usage: "write the raw payload of one message to standard output"},
			&cli.BoolFlag{Name: "result", DisableDefaultText: true, Usage: "write the raw result of one message (what its stage left) to standard output"},
			&cli.BoolFlag{Name: "json", DisableDefaultText: true, Usage: "one JSON object per line"},
		},
		Action: queueShow,
	}
}

func queueShow(c *cli.Context) error {
	ids, err := parseIDs(c.Args().Slice())
	if err != nil {
		return err
	}
	payload, result := c.Bool("payload"), c.Bool("result")
	raw := "--payload"
	if result {
		raw = "--result"
	}
	switch {
	case len(ids) == 0:
		return usage("no message ID given")
	case payload && result:
		return usage("--payload and --result do not go together")
	case (payload || result) && len(ids) > 1:
		return usage("%s writes one message: give one ID, not %d", raw, len(ids))
	case (payload || result) && c.Bool("json"):
		return usage("%s and --json do not go together", raw)
	}
	db, _, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()

	if payload {
		p, err := db.Payload(c.Context, ids[0])
		if err != nil {
			return notFound(idError(err, ids[0]))
		}
		_, err = c.App.Writer.Write(p)
		return err
	}
	if result {
		r, err := db.ResultOf(c.Context, ids[0])
		if err != nil {
			return notFound(idError(err, ids[0]))
		}
		_, err = c.App.Writer.Write(r)
		return err
	}
	msgs := make([]*admin.Message, len(ids))
	for i, id := range ids {
		if msgs[i], err = db.Show(c.Context, id); err != nil {
			return notFound(idError(err, id))
		}
	}
	out := bufio.NewWriter(c.App.Writer)
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		for _, m := range msgs {
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return out.Flush()
	}
	now, err := db.Now(c.Context)
	if err != nil {
		return err
	}
	for i, m := range msgs {
		if i > 0 {
			out.WriteByte('\n')
		}
		writeMessage(out, m, now)
	}
	return out.Flush()
}

// idError names the id in a missing message's error.
func idError(err error, id int64) error {
	if err == admin.ErrNotFound {
		return &admin.NotFoundError{ID: id}
	}
	return err
}

// writeMessage writes one message as "key  value" lines.
func writeMessage(out *bufio.Writer, m *admin.Message, now time.Time) {
	kv := func(k, v string) { fmt.Fprintf(out, "%-15s %s\n", printable(k), printable(v)) }
	opt := func(s *string) string {
		if s == nil {
			return "-"
		}
		return quoteIfNeeded(*s)
	}
	kv("id", strconv.FormatInt(m.ID, 10))
	kv("stage", m.Stage)
	kv("status", string(m.Status))
	kv("attempts", strconv.Itoa(m.Attempts))
	kv("priority", strconv.Itoa(int(m.Priority)))
	kv("key", opt(m.Key))
	if m.FlowKey != nil {
		// Its key at a stage with KEY, and what it waits for there.
		fk := quoteIfNeeded(*m.FlowKey)
		if m.Behind != nil {
			fk += " (waits behind " + strconv.FormatInt(*m.Behind, 10) + ")"
		}
		kv("flow_key", fk)
	}
	kv("created", fmtTime(m.CreatedAt)+" ("+fmtAge(now.Sub(m.CreatedAt))+" ago)")
	kv("updated", fmtTime(m.UpdatedAt)+" ("+fmtAge(now.Sub(m.UpdatedAt))+" ago)")
	timeout := "-"
	if m.Timeout != nil {
		// A paused message (a retry, or a scheduled one) runs then.
		timeout = fmtTime(m.Timeout.Time)
		if m.Timeout.Sub(now) < farAway { // else fmtDue is the date, which the time says
			timeout += " (" + fmtDue(m.Timeout.Time, now) + ")"
		}
	}
	if m.Status == queue.Waiting {
		timeout += " (waiting at join " + quoteIfNeeded(m.Stage) + ": pending there once its children have ended)"
	}
	if m.Status == queue.Held {
		if m.Timeout == nil {
			timeout += " (held: pending when released)"
		} else {
			timeout += ", held: paused until then when released"
		}
	}
	kv("timeout", timeout)
	kv("error", opt(m.Error))
	kv("dispatch_error", opt(m.DispatchError))
	writeHistory(kv, m.History)
	var headers map[string]json.RawMessage
	if json.Unmarshal(m.Headers, &headers) != nil {
		kv("headers", string(m.Headers)) // not an object: as stored
	} else if len(headers) == 0 {
		kv("headers", "-")
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := string(headers[k])
		var s string
		if json.Unmarshal(headers[k], &s) == nil {
			v = quoteIfNeeded(s)
		}
		kv("header "+quoteIfNeeded(k), v)
	}
	kv("payload", plural(int64(m.PayloadSize), "byte"))
	writeFamily(kv, m)
}

// writeHistory writes a message's failed passes, oldest first, one line
// each: when, where, which attempt, how it failed, the worker, the reason.
func writeHistory(kv func(k, v string), passes []admin.Pass) {
	if len(passes) == 0 {
		kv("failed passes", "none")
		return
	}
	n := strconv.Itoa(len(passes))
	if len(passes) == queue.HistoryKeep {
		n += " (the last " + n + " are kept)"
	}
	kv("failed passes", n)
	for _, p := range passes {
		worker := ""
		if p.PID != nil {
			worker = " pid " + strconv.Itoa(int(*p.PID))
			if p.Host != nil && *p.Host != "" {
				worker += " on " + quoteIfNeeded(*p.Host)
			}
		}
		kv("pass "+strconv.Itoa(p.N), fmtTime(p.At)+" "+quoteIfNeeded(p.Stage)+" attempt "+strconv.Itoa(p.Attempt)+
			" "+p.Kind+worker+": "+quoteIfNeeded(p.Reason))
	}
}

// quoteIfNeeded quotes s when it would not read as one plain line: it is
// empty, has a quote, blanks at an end, or what printable escapes.
func quoteIfNeeded(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r == '"' || unsafeRune(r) }) || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	return s
}
