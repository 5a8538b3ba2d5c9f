package app

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// queueCommand is "pepsi queue": inspection (summary, ls, show), repair
// (retry, purge) and control (pause, resume, hold, release, cancel) of the
// queue, for administrators. Each subcommand is in a file of its own:
// queue_summary.go, queue_ls.go, queue_show.go, queue_repair.go,
// queue_controls.go.
func queueCommand() *cli.Command {
	return &cli.Command{
		Name:      "queue",
		Usage:     "inspect, repair and control the queue (summary, ls, show, retry, purge, pause, resume, hold, release, cancel)",
		UsageText: "pepsi queue [summary]\npepsi queue ls|show|retry|purge|pause|resume|hold|release|cancel [options] [arguments]",
		Description: "Without a command, prints the summary: messages per stage and status,\n" +
			"and how long the oldest pending message of each stage has waited.",
		Subcommands: []*cli.Command{
			queueSummaryCommand(),
			queueLsCommand(),
			queueShowCommand(),
			queueRetryCommand(),
			queuePurgeCommand(),
			queuePauseCommand(),
			queueResumeCommand(),
			holdCommand.command(),
			releaseCommand.command(),
			cancelCommand.command(),
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usage("unknown queue command %q (want summary, ls, show, retry, purge, pause, resume, hold, release or cancel)", c.Args().First())
			}
			return queueSummary(c)
		},
	}
}

// openQueue loads the configuration and opens a small pool, its sessions
// named after the command (visible in pg_stat_activity), on a database
// whose schema is current, and admits what pepsi.enqueue() left in
// pepsi.ingress, so that the command sees every message enqueued before
// it started (a dispatcher admits them at its next poll anyway). A session
// that may not write (a read-only role, a standby, a role with SELECT
// only) admits nothing: the commands that look show what waits in
// pepsi.ingress as enqueued, and those that write fail at their own write.
func openQueue(c *cli.Context) (*admin.DB, *config.Config, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, nil, err
	}
	if _, err := parseDSN(cfg); err != nil {
		return nil, nil, err
	}
	db, err := admin.Open(c.Context, cfg.DSN, queue.Options{App: commandName(c), MaxConns: 2})
	if err != nil {
		return nil, nil, err
	}
	if err := db.CheckSchema(c.Context); err != nil {
		db.Close()
		return nil, nil, err
	}
	if _, err := db.Admit(c.Context); err != nil && !queue.MayNotWrite(err) {
		db.Close()
		return nil, nil, err
	}
	return db, cfg, nil
}

// parseStatusFlag reads --status (empty: none given).
func parseStatusFlag(c *cli.Context) (queue.Status, error) {
	s := c.String("status")
	if s == "" {
		if c.IsSet("status") {
			return "", usage("--status is empty (want %s)", statusWords())
		}
		return "", nil
	}
	st, err := queue.ParseStatus(s)
	if err != nil {
		return "", usage("--status %q: unknown status (want %s)", s, statusWords())
	}
	return st, nil
}

// statusWords names every status (queue.Statuses), for messages.
func statusWords() string {
	words := make([]string, len(queue.Statuses))
	for i, st := range queue.Statuses {
		words[i] = string(st)
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// parseStageFlag reads a stage-name flag (empty: none given). Any
// well-formed name is accepted: messages may wait at a stage that is no
// longer configured.
func parseStageFlag(c *cli.Context, flag string) (string, error) {
	s := c.String(flag)
	if s == "" {
		if c.IsSet(flag) {
			return "", usage("--%s is empty", flag)
		}
		return "", nil
	}
	if err := protocol.CheckStage(s); err != nil {
		return "", usage("--%s %q: bad stage name (%v)", flag, s, err)
	}
	return s, nil
}

// parsePriorityFlag reads --priority: an integer (lower is claimed
// first), nil when the flag is not given. The column is a 32-bit integer;
// the error gives its range, so that a number too large is not taken for
// one that is not a number.
func parsePriorityFlag(c *cli.Context) (*int32, error) {
	if !c.IsSet("priority") {
		return nil, nil
	}
	s := c.String("priority")
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if errors.Is(err, strconv.ErrRange) {
		return nil, usage("--priority %q: out of range (want an integer from %d to %d; lower is claimed first)", s, math.MinInt32, math.MaxInt32)
	}
	if err != nil {
		return nil, usage("--priority %q: want an integer from %d to %d (lower is claimed first)", s, math.MinInt32, math.MaxInt32)
	}
	p := int32(n)
	return &p, nil
}

// parseAge reads a duration flag with config.ParseAge: plain seconds
// ("300"), a Go duration ("90m", "36h", "1h30m"), or days first ("7d",
// "1d12h"). Negative durations are refused.
func parseAge(flag, s string) (time.Duration, error) {
	d, err := config.ParseAge(s)
	if err != nil {
		return 0, usage("--%s %q: want seconds or a duration such as 90m, 36h or 7d", flag, s)
	}
	return d, nil
}

// parseIDs reads message ids: positive decimal integers. A flag among them
// is a flag given after the first id.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			return nil, usage("%q after a message id: flags come first", a)
		}
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usage("bad message id %q (want a positive integer)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// notFound turns a missing message into a command-line error (exit 2).
func notFound(err error) error {
	if errors.Is(err, admin.ErrNotFound) {
		return invalid("%v", err)
	}
	return err
}

// fmtAge writes a duration compactly, to the second: 42s, 5m03s, 2h05m,
// 3d04h. A negative duration is 0s.
func fmtAge(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// fmtTime writes a time as the other commands do, in local time.
func fmtTime(t time.Time) string { return t.Local().Format(time.DateTime + " -0700") }

// oneLine collapses blanks and newlines and cuts s to at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// plural returns "1 message" or "N messages".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}
