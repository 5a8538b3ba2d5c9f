package app

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func queueRetryCommand() *cli.Command {
	return &cli.Command{
		Name:      "retry",
		Usage:     "put failed (or paused, done, orphaned) messages back to pending",
		ArgsUsage: "ID...",
		UsageText: "pepsi queue retry [--to-stage NAME] [--priority N] ID...\n" +
			"pepsi queue retry --status failed|paused|done|running [--stage NAME] [--to-stage NAME] [--priority N]",
		Description: "Redrives messages: each goes back to pending (at --to-stage, if given)\n" +
			"with its timeout, attempts and errors cleared (a stage's pepsi.fail reason,\n" +
			"or a dispatch_error its history lacks, is kept in its history first), and a\n" +
			"running dispatcher is woken. By ID, every ID must exist or nothing changes; messages already\n" +
			"pending are left alone. Running messages are left alone while a\n" +
			"dispatcher runs (it holds them; exit 1). Prints how many were retried.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "status", Usage: "retry every message with `STATUS`: failed, paused, done or running"},
			&cli.StringFlag{Name: "stage", Aliases: []string{"s"}, Usage: "with --status: only messages at stage `NAME`"},
			&cli.StringFlag{Name: "to-stage", Usage: "put the messages back at stage `NAME` instead of their own"},
			&cli.StringFlag{Name: "priority", Usage: "give the messages priority `N` (lower is claimed first)"},
		},
		Action: queueRetry,
	}
}

func queueRetry(c *cli.Context) error {
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
	to, err := parseStageFlag(c, "to-stage")
	if err != nil {
		return err
	}
	prio, err := parsePriorityFlag(c)
	if err != nil {
		return err
	}
	switch {
	case len(ids) > 0 && status != "":
		return usage("give message IDs or --status, not both")
	case len(ids) == 0 && status == "":
		return usage("give message IDs, or --status failed to retry every failed message")
	case len(ids) > 0 && stage != "":
		return usage("--stage selects messages with --status; with IDs, the IDs do")
	case status == queue.Pending:
		return usage("--status pending: pending messages are queued already")
	}
	db, cfg, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := checkToStage(cfg, to); err != nil {
		return err
	}
	p := admin.RedriveParams{IDs: ids, Status: status, Stage: stage, ToStage: to, Priority: prio}
	done := progress(c, &p.Progress)
	res, err := db.Redrive(c.Context, p)
	done()
	if err != nil {
		return notFound(err)
	}
	line := "retried " + plural(res.Changed, "message")
	if to != "" {
		line += " to stage " + to
	}
	if prio != nil {
		line += fmt.Sprintf(" with priority %d", *prio)
	}
	if res.Pending > 0 {
		line += fmt.Sprintf("; %d already pending", res.Pending)
	}
	fmt.Fprintln(c.App.Writer, line)
	return heldError(res)
}

// checkToStage requires --to-stage to be configured, when the
// configuration has stages (as enqueue does for --stage).
func checkToStage(cfg *config.Config, stage string) error {
	if stage == "" || len(cfg.Stages) == 0 {
		return nil
	}
	if _, ok := cfg.Stage(stage); !ok {
		return invalid("--to-stage %q: no [stage-%s] in %s", stage, stage, cfg.Path)
	}
	return nil
}

func queuePurgeCommand() *cli.Command {
	return &cli.Command{
		Name:  "purge",
		Usage: "delete done, failed or cancelled messages",
		UsageText: "pepsi queue purge --status done|failed [--older-than DURATION] [--stage NAME] [--dry-run]\n" +
			"pepsi queue purge --status pending|paused|held|waiting|running --force [...]",
		Description: "Deletes the messages with --status (and --stage, and unchanged for\n" +
			"--older-than), payload and all, in batches of 10000 rows, each in its own\n" +
			"transaction; the count goes to standard error as it grows when that is a\n" +
			"terminal. Pending, paused, held, waiting and running messages are live\n" +
			"work: purging them needs --force, and running ones are left alone while a\n" +
			"dispatcher runs (exit 1). A purged message's unfinished descendants (in a\n" +
			"graph: its children, theirs, ...) are deleted with it, but for running\n" +
			"ones, which are cancelled; a parent waiting at a join for a purged child\n" +
			"goes on once no child of it is open. Prints how many were deleted, and\n" +
			"how many descendants (not counted by --dry-run).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "status", Usage: "delete messages with `STATUS`: done, failed or cancelled (pending, paused, held, waiting, running: with --force)"},
			&cli.StringFlag{Name: "older-than", Usage: "only messages unchanged for `DURATION` (seconds, or 90m, 36h, 7d)"},
			&cli.StringFlag{Name: "stage", Aliases: []string{"s"}, Usage: "only messages at stage `NAME`"},
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, DisableDefaultText: true, Usage: "count what would be deleted; delete nothing"},
			&cli.BoolFlag{Name: "force", DisableDefaultText: true, Usage: "allow purging pending, paused, held, waiting or running messages"},
		},
		Action: queuePurge,
	}
}

func queuePurge(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	status, err := parseStatusFlag(c)
	if err != nil {
		return err
	}
	if status == "" {
		return usage("--status is required: done, failed or cancelled (pending, paused, held, waiting or running with --force)")
	}
	if !status.Finished() && !c.Bool("force") {
		return usage("--status %s: these messages are live work; purging them needs --force", status)
	}
	p := admin.PurgeParams{Status: status, DryRun: c.Bool("dry-run")}
	if p.Stage, err = parseStageFlag(c, "stage"); err != nil {
		return err
	}
	if s := c.String("older-than"); s != "" || c.IsSet("older-than") {
		if p.OlderThan, err = parseAge("older-than", s); err != nil {
			return err
		}
	}
	db, _, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	done := progress(c, &p.Progress)
	res, err := db.Purge(c.Context, p)
	done()
	if err != nil {
		if res.Changed > 0 {
			return fmt.Errorf("%v (after deleting %s)", err, plural(res.Changed, "message"))
		}
		return err
	}
	if p.DryRun {
		fmt.Fprintf(c.App.Writer, "would purge %s\n", plural(res.Changed, "message"))
	} else {
		fmt.Fprintf(c.App.Writer, "purged %s%s\n", plural(res.Changed, "message"), treeText(res))
	}
	return heldError(res)
}

// treeText says what a purge did to the unfinished descendants of the
// messages it deleted, "" when they had none.
func treeText(res admin.Repair) string {
	switch {
	case res.Descendants == 0 && res.Cancelled == 0:
		return ""
	case res.Cancelled == 0:
		return fmt.Sprintf(", and %s of theirs", plural(res.Descendants, "unfinished descendant"))
	}
	return fmt.Sprintf(", and %s of theirs (%d running: cancelled instead)", plural(res.Descendants+res.Cancelled, "unfinished descendant"), res.Cancelled)
}

// heldError reports running messages a repair left alone: the request was
// not carried out in full (exit 1).
func heldError(res admin.Repair) error {
	if res.Held == 0 {
		return nil
	}
	who := "a running dispatcher"
	if d := res.Holder; d != nil && d.PID != 0 {
		who = "the running dispatcher (" + d.String() + ")"
	}
	return fmt.Errorf("left %s alone: held by %s; stop it first", plural(res.Held, "running message"), who)
}

// progress shows a repair's running count on standard error when that is a
// terminal: it sets *fn and returns what to call when the repair is over.
func progress(c *cli.Context, fn *func(int64)) (done func()) {
	if !isTerminal(c.App.ErrWriter) {
		return func() {}
	}
	name := c.Command.HelpName
	shown := false
	*fn = func(n int64) {
		shown = true
		fmt.Fprintf(c.App.ErrWriter, "\r%s: %s", name, plural(n, "message"))
	}
	return func() {
		if shown {
			fmt.Fprintln(c.App.ErrWriter)
		}
	}
}
