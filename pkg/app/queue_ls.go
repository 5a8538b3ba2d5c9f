package app

import (
	"bufio"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// lsPage is how many rows ls reads per query: it pages through the queue
// in id order, so that its memory does not grow with the queue.
const lsPage = 1000

// errorWidth is the most runes of an error the ls table shows.
const errorWidth = 60

// keyWidth is the most runes of a deduplication key the ls table shows.
const keyWidth = 24

func queueLsCommand() *cli.Command {
	return &cli.Command{
		Name:      "ls",
		Usage:     "list messages in id order",
		UsageText: "pepsi queue ls [--stage NAME] [--status STATUS] [--parent ID] [--older-than DURATION] [--header KEY=VALUE]... [--payload TEXT] [--since DURATION] [--limit N] [--json]",
		Description: "Lists the messages that match, in id (ingress) order: id, stage, status,\n" +
			"attempts, priority, deduplication key, age (time since the row last\n" +
			"changed), timeout (when a paused message is due: a retry, or a scheduled\n" +
			"message, runs then; a held one keeps it for its release) and error. With\n" +
			"--parent, the children of message ID (those it spawned, in a graph). With --json,\n" +
			"one JSON object per line. A search (--header, --payload) reads the messages\n" +
			"enqueued within --since (default 24h), and stops with an error after 10 s.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "stage", Aliases: []string{"s"}, Usage: "only messages at stage `NAME`"},
			&cli.StringFlag{Name: "status", Usage: "only messages with `STATUS`: " + statusWords()},
			&cli.StringFlag{Name: "parent", Usage: "only the children of message `ID`"},
			&cli.StringFlag{Name: "older-than", Usage: "only messages unchanged for `DURATION` (seconds, or 90m, 36h, 7d)"},
			&cli.GenericFlag{Name: "header", Value: &stringList{}, Usage: "only messages whose header KEY has the value VALUE (`KEY=VALUE`; repeat it: every one)"},
			&cli.StringFlag{Name: "payload", Usage: "only messages whose payload is UTF-8 text containing `TEXT` (case counts)"},
			&cli.StringFlag{Name: "since", Usage: "only messages enqueued within `DURATION` (a search's default: 24h)"},
			&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Usage: "list at most `N` messages (0: all)"},
			&cli.BoolFlag{Name: "json", DisableDefaultText: true, Usage: "one JSON object per line"},
		},
		Action: queueLs,
	}
}

func queueLs(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	p, err := lsParams(c)
	if err != nil {
		return err
	}
	limit := p.Limit
	db, _, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	now, err := db.Now(c.Context)
	if err != nil {
		return err
	}

	out := bufio.NewWriterSize(c.App.Writer, 64<<10)
	var emit func([]admin.Row) error
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		emit = func(rows []admin.Row) error {
			for i := range rows {
				if err := enc.Encode(&rows[i]); err != nil {
					return err
				}
			}
			return nil
		}
	} else {
		tab := newTable(out, []string{"ID", "STAGE", "STATUS", "ATTEMPTS", "PRIO", "KEY", "AGE", "TIMEOUT", "ERROR"})
		emit = func(rows []admin.Row) error {
			cells := make([][]string, len(rows))
			for i := range rows {
				cells[i] = lsCells(&rows[i], now)
			}
			return tab.write(cells)
		}
	}
	listed := 0
	for {
		p.Limit = lsPage
		if limit > 0 {
			p.Limit = min(lsPage, limit-listed)
		}
		rows, err := db.List(c.Context, p)
		if err != nil {
			return err
		}
		if len(rows) == 0 && listed > 0 {
			break
		}
		if err := emit(rows); err != nil {
			return err
		}
		listed += len(rows)
		if len(rows) < p.Limit || (limit > 0 && listed >= limit) {
			break
		}
		p.AfterID = rows[len(rows)-1].ID
	}
	if err := out.Flush(); err != nil {
		return err
	}
	return noteEnqueued(c, db, p)
}

// lsParams reads the filters of ls.
func lsParams(c *cli.Context) (admin.ListParams, error) {
	var p admin.ListParams
	var err error
	if p.Stage, err = parseStageFlag(c, "stage"); err != nil {
		return p, err
	}
	if p.Status, err = parseStatusFlag(c); err != nil {
		return p, err
	}
	if s := c.String("older-than"); s != "" || c.IsSet("older-than") {
		if p.OlderThan, err = parseAge("older-than", s); err != nil {
			return p, err
		}
	}
	if s := c.String("parent"); s != "" || c.IsSet("parent") {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return p, usage("--parent %q: want a message id (a positive integer)", s)
		}
		p.Parent = id
	}
	if p.Search, err = searchFlags(c); err != nil {
		return p, err
	}
	if p.Limit = c.Int("limit"); p.Limit < 0 {
		return p, usage("--limit %d: want 0 (all) or more", p.Limit)
	}
	return p, nil
}

// searchFlags reads --header, --payload and --since.
func searchFlags(c *cli.Context) (admin.Search, error) {
	var s admin.Search
	if l, ok := c.Generic("header").(*stringList); ok {
		for _, v := range *l {
			if err := checkUTF8("header", v); err != nil {
				return s, err
			}
			h, err := admin.ParseHeader(v)
			if err != nil {
				return s, usage("--header %v", err)
			}
			s.Headers = append(s.Headers, h)
		}
	}
	if s.Payload = c.String("payload"); s.Payload == "" && c.IsSet("payload") {
		return s, usage("--payload is empty")
	}
	if err := checkUTF8("payload", s.Payload); err != nil {
		return s, err
	}
	if v := c.String("since"); v != "" || c.IsSet("since") {
		d, err := parseAge("since", v)
		if err != nil {
			return s, err
		}
		if d <= 0 {
			return s, usage("--since %q: want a duration of more than 0", v)
		}
		s.Since = d
	}
	return s, nil
}

// stringList is a flag that may be given more than once, each value
// whole (a StringSliceFlag would split a value at its commas).
type stringList []string

func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ", ")
}

// lsCells is one line of the ls table.
func lsCells(r *admin.Row, now time.Time) []string {
	timeout := "-"
	if r.Timeout != nil {
		timeout = fmtDue(r.Timeout.Time, now)
	}
	msg := "-"
	switch {
	case r.Error != nil && *r.Error != "":
		msg = oneLine(*r.Error, errorWidth)
	case r.DispatchError != nil && *r.DispatchError != "":
		msg = oneLine(*r.DispatchError, errorWidth)
	}
	key := "-"
	if r.Key != nil {
		key = oneLine(*r.Key, keyWidth)
	}
	return []string{strconv.FormatInt(r.ID, 10), r.Stage, string(r.Status), strconv.Itoa(r.Attempts),
		strconv.Itoa(int(r.Priority)), key, fmtAge(now.Sub(r.UpdatedAt)), timeout, msg}
}
