package app

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The operator's controls: pause and resume a stage; hold, release and
// cancel messages (pkg/admin's controls, which the dashboard calls too).

func queuePauseCommand() *cli.Command {
	return &cli.Command{
		Name:      "pause",
		Usage:     "hand a stage nothing new until it is resumed",
		UsageText: "pepsi queue pause --stage NAME [--reason TEXT]",
		Description: "Pauses a stage: from their next claim on, the dispatchers hand it no\n" +
			"message, without a restart; its running messages finish, and messages go\n" +
			"on arriving (they wait, pending). The pause is kept in the database\n" +
			"(pepsi.paused_stages) with who paused it, when and why, and outlasts\n" +
			"restarts. The stage must be configured, or have messages, statistics or a\n" +
			"pause in the database.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "stage", Aliases: []string{"s"}, Usage: "pause stage `NAME`"},
			&cli.StringFlag{Name: "reason", Usage: "why (`TEXT`): shown by pepsi queue and the dashboard"},
		},
		Action: queuePause,
	}
}

func queueResumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "end a stage's pause",
		UsageText: "pepsi queue resume --stage NAME",
		Description: "Ends the pause of a stage and wakes the dispatchers, whose next claim\n" +
			"hands out its pending messages.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "stage", Aliases: []string{"s"}, Usage: "resume stage `NAME`"},
		},
		Action: queueResume,
	}
}

// stageArg reads the required --stage of pause and resume.
func stageArg(c *cli.Context) (string, error) {
	if c.Args().Present() {
		return "", usage("unexpected argument %q (the stage goes with --stage)", c.Args().First())
	}
	stage, err := parseStageFlag(c, "stage")
	if err != nil {
		return "", err
	}
	if stage == "" {
		return "", usage("--stage is required")
	}
	return stage, nil
}

func queuePause(c *cli.Context) error {
	stage, err := stageArg(c)
	if err != nil {
		return err
	}
	reason := c.String("reason")
	if err := checkUTF8("reason", reason); err != nil {
		return err
	}
	if len(reason) > 1000 {
		return usage("--reason of %d bytes: want at most 1000", len(reason))
	}
	db, cfg, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := knownStage(c, db, cfg, stage); err != nil {
		return err
	}
	p, already, err := db.PauseStage(c.Context, stage, osUser(), reason)
	if err != nil {
		return err
	}
	if already {
		_, err = fmt.Fprintf(c.App.Writer, "stage %s is paused already: %s\n", stage, pauseText(p, time.Time{}))
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "paused stage %s\n", stage)
	return err
}

func queueResume(c *cli.Context) error {
	stage, err := stageArg(c)
	if err != nil {
		return err
	}
	db, cfg, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	p, was, err := db.ResumeStage(c.Context, stage)
	if err != nil {
		return err
	}
	if !was {
		if err := knownStage(c, db, cfg, stage); err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "stage %s was not paused\n", stage)
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "resumed stage %s (%s)\n", stage, pauseText(p, time.Time{}))
	return err
}

// knownStage refuses a stage that pepsi.conf does not configure and the
// database has never seen (admin.StageSeen): a typo would pause nothing.
func knownStage(c *cli.Context, db *admin.DB, cfg *config.Config, stage string) error {
	if _, ok := cfg.Stage(stage); ok {
		return nil
	}
	seen, err := db.StageSeen(c.Context, stage)
	if err != nil || seen {
		return err
	}
	where := "no [stage-" + stage + "] in " + cfg.Path
	if cfg.Path == "" {
		where = "no configuration names it"
	}
	return invalid("--stage %q: unknown stage (%s, and it has no messages, statistics or pause)", stage, where)
}

// pauseText says who paused a stage, when (and how long ago, when now is
// set) and why, printable.
func pauseText(p admin.StagePause, now time.Time) string {
	s := "paused by " + printable(p.By) + " at " + fmtTime(p.At)
	if !now.IsZero() {
		s += " (" + fmtAge(now.Sub(p.At)) + " ago)"
	}
	if p.Reason != "" {
		s += ": " + printable(oneLine(p.Reason, 200))
	}
	return s
}

// osUser is the acting user of a command: the OS user's name (its uid
// when it has none).
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if s := os.Getenv("USER"); s != "" {
		return s
	}
	return strconv.Itoa(os.Getuid())
}

// messageControl describes one of hold, release and cancel.
type messageControl struct {
	name     string
	usage    string
	statuses []queue.Status // what --status takes
	want     string         // the same, as errors name them
	done     string         // past tense, for the report: "held"
	run      func(*admin.DB, *cli.Context, admin.ControlParams) (admin.ControlResult, error)
	text     string
	force    bool // has --force
}

var (
	holdCommand = messageControl{
		name:     "hold",
		usage:    "hold messages: never claimed until released, keeping their place",
		statuses: []queue.Status{queue.Pending, queue.Paused},
		want:     "pending or paused",
		done:     "held",
		run: func(db *admin.DB, c *cli.Context, p admin.ControlParams) (admin.ControlResult, error) {
			return db.Hold(c.Context, p)
		},
		text: "Holds pending and paused messages, as Postfix's hold queue does: a held\n" +
			"message (status held) is never claimed until it is released, and keeps its\n" +
			"place: its id, its deduplication key, and at a stage with KEY its key's\n" +
			"place (later messages of its key wait for it). A paused message keeps when\n" +
			"it is due. Running messages are left alone (exit 1). By ID, every ID must\n" +
			"exist or nothing changes; messages not pending or paused are left as they\n" +
			"are. Prints how many were held.",
	}
	releaseCommand = messageControl{
		name:     "release",
		usage:    "release held messages",
		statuses: []queue.Status{queue.Held},
		want:     "held",
		done:     "released",
		run: func(db *admin.DB, c *cli.Context, p admin.ControlParams) (admin.ControlResult, error) {
			return db.Release(c.Context, p)
		},
		text: "Releases held messages: each goes back to paused until its timeout when it\n" +
			"had one (a retry, a scheduled message), else to pending, and a running\n" +
			"dispatcher is woken. By ID, every ID must exist or nothing changes.\n" +
			"Prints how many were released.",
	}
	cancelCommand = messageControl{
		name:     "cancel",
		usage:    "end messages failed, \"cancelled by USER\"",
		statuses: []queue.Status{queue.Pending, queue.Paused, queue.Held, queue.Waiting},
		want:     "pending, paused, held or waiting",
		done:     "cancelled",
		run: func(db *admin.DB, c *cli.Context, p admin.ControlParams) (admin.ControlResult, error) {
			return db.Cancel(c.Context, p)
		},
		text: "Cancels messages: each ends failed, its error \"cancelled by USER\" (the OS\n" +
			"user), and its deduplication key is free again. A running message is left\n" +
			"alone while a dispatcher holds it (exit 1), unless --force: then it is\n" +
			"cancelled at once and the outcome of its pass is ignored (the stage's own\n" +
			"move is refused, which rolls back the work of its transaction; a move on\n" +
			"its status line is not made), except in a pass that holds its row\n" +
			"locked (pkg/worker's): that one is named busy, not waited for (exit 1).\n" +
			"By ID, every ID must exist or nothing changes; finished messages are left\n" +
			"as they are. A cancelled message's unfinished descendants (its children,\n" +
			"theirs, ...) are cancelled with it, running ones included; a parent waiting\n" +
			"at a join goes on once its last open child is cancelled. Prints how many\n" +
			"were cancelled (the descendants not counted).",
		force: true,
	}
)

func (m messageControl) command() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "status", Usage: m.name + " every message with `STATUS`: " + m.want},
		&cli.StringFlag{Name: "stage", Aliases: []string{"s"}, Usage: "with --status: only messages at stage `NAME`"},
	}
	usageText := "pepsi queue " + m.name + " ID...\npepsi queue " + m.name + " --status " + m.want + " [--stage NAME]"
	if m.force {
		flags = append(flags, &cli.BoolFlag{Name: "force", DisableDefaultText: true, Usage: "cancel running messages too (by ID): the outcome of their pass is ignored"})
		usageText = "pepsi queue " + m.name + " [--force] ID...\npepsi queue " + m.name + " --status pending|paused|held|waiting [--stage NAME]"
	}
	return &cli.Command{
		Name:        m.name,
		Usage:       m.usage,
		ArgsUsage:   "ID...",
		UsageText:   usageText,
		Description: m.text,
		Flags:       flags,
		Action:      m.action,
	}
}

func (m messageControl) action(c *cli.Context) error {
	ids, err := parseIDs(c.Args().Slice())
	if err != nil {
		return err
	}
	status, err := parseStatusFlag(c)
	if err != nil {
		return err
	}
	stage, err := parseStageFlag(c, "stage")
	if err != nil {
		return err
	}
	force := m.force && c.Bool("force")
	switch {
	case len(ids) > 0 && status != "":
		return usage("give message IDs or --status, not both")
	case len(ids) == 0 && status == "":
		return usage("give message IDs, or --status %s (with --stage NAME)", m.want)
	case len(ids) > 0 && stage != "":
		return usage("--stage selects messages with --status; with IDs, the IDs do")
	case status != "" && !slices.Contains(m.statuses, status):
		return usage("--status %s: want %s (%s messages by ID)", status, m.want, m.name)
	case force && len(ids) == 0:
		return usage("--force cancels running messages by ID only")
	}
	db, _, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	p := admin.ControlParams{IDs: ids, Status: status, Stage: stage, By: osUser(), Force: force}
	done := progress(c, &p.Progress)
	res, err := m.run(db, c, p)
	done()
	if err != nil {
		if res.Changed > 0 {
			return fmt.Errorf("%v (after %s %s)", err, plural(res.Changed, "message"), m.done)
		}
		return notFound(err)
	}
	line := m.done + " " + plural(res.Changed, "message")
	if res.Skipped > 0 {
		line += fmt.Sprintf("; %d not %s, left as %s", res.Skipped, m.want, pronoun(res.Skipped))
	}
	if _, err := fmt.Fprintln(c.App.Writer, line); err != nil {
		return err
	}
	return runningError(m, res)
}

// pronoun is "it" or "they" for n things.
func pronoun(n int64) string {
	if n == 1 {
		return "it was"
	}
	return "they were"
}

// runningError reports running messages a control left alone: the
// request was not carried out in full (exit 1).
func runningError(m messageControl, res admin.ControlResult) error {
	if res.Running == 0 {
		return nil
	}
	if len(res.Busy) > 0 {
		ids := make([]string, len(res.Busy))
		for i, id := range res.Busy {
			ids[i] = strconv.FormatInt(id, 10)
		}
		return fmt.Errorf("busy, not cancelled: %s (its stage's pass holds the row locked, as pkg/worker's does, and ends as the stage decides; cancel again after the pass if it is still running)",
			strings.Join(ids, " "))
	}
	n := plural(res.Running, "running message")
	if !m.force {
		return fmt.Errorf("left %s alone: in a stage's pass; %s it once it is back", n, m.name)
	}
	who := "a running dispatcher"
	if d := res.Holder; d != nil && d.PID != 0 {
		who = "the running dispatcher (" + d.String() + ")"
	}
	return fmt.Errorf("left %s alone: held by %s; --force cancels it in its pass", n, who)
}
