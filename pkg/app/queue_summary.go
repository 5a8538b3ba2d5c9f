package app

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func queueSummaryCommand() *cli.Command {
	return &cli.Command{
		Name:  "summary",
		Usage: "count the messages per stage and status (the default)",
		Description: "Prints a table of the messages per stage and status, with each stage's\n" +
			"total, how long its oldest pending message has waited and when its next\n" +
			"paused message (a retry, or a scheduled message) is due (a configured stage\n" +
			"keeps its line, with zeros), a line of totals,\n" +
			"a line for each stage with messages enqueued but not yet admitted,\n" +
			"a line for each paused stage (who paused it, when and why),\n" +
			"a line for each stage with waiting messages that the configuration lacks,\n" +
			"a line for each stage with KEY (as its dispatcher set it at start),\n" +
			"and whether a dispatcher is running; while dispatchers with stage sets run,\n" +
			"a line for each stage naming its owner (pid and host), or that it has none.",
		Action: queueSummary,
	}
}

// allStages is the label of the totals line; it cannot be a stage name.
const allStages = "(all)"

func queueSummary(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	db, cfg, err := openQueue(c)
	if err != nil {
		return err
	}
	defer db.Close()
	counts, err := db.Counts(c.Context)
	if err != nil {
		return err
	}
	now, err := db.Now(c.Context)
	if err != nil {
		return err
	}
	d, err := db.LockHolder(c.Context)
	if err != nil {
		return err
	}
	due, err := db.NextDue(c.Context)
	if err != nil {
		return err
	}
	paused, err := db.PausedStages(c.Context)
	if err != nil {
		return err
	}

	header := []string{"STAGE"}
	for _, st := range queue.Statuses {
		header = append(header, string(st))
	}
	header = append(header, "total", "OLDEST_PENDING", "NEXT_DUE")

	type line struct {
		n       map[queue.Status]int64
		total   int64
		pending *admin.Count
		due     time.Time // when its next paused message is due
	}
	var order []string
	lines := map[string]*line{}
	all := &line{n: map[queue.Status]int64{}}
	for i := range counts {
		cnt := &counts[i]
		l := lines[cnt.Stage]
		if l == nil {
			l = &line{n: map[queue.Status]int64{}}
			lines[cnt.Stage] = l
			order = append(order, cnt.Stage) // Counts is ordered by stage
		}
		l.n[cnt.Status] += cnt.N
		l.total += cnt.N
		all.n[cnt.Status] += cnt.N
		all.total += cnt.N
		if cnt.Status == queue.Pending {
			l.pending = cnt
			if all.pending == nil || cnt.Oldest.Before(all.pending.Oldest) {
				all.pending = cnt
			}
		}
	}
	row := func(name string, l *line) []string {
		r := []string{name}
		for _, st := range queue.Statuses {
			r = append(r, strconv.FormatInt(l.n[st], 10))
		}
		age := "-"
		if l.pending != nil {
			age = fmtAge(now.Sub(l.pending.Oldest))
		}
		next := "-"
		if !l.due.IsZero() {
			next = fmtDue(l.due, now)
		}
		return append(r, strconv.FormatInt(l.total, 10), age, next)
	}
	// A configured stage keeps its line when it has no message, as on the
	// dashboard: an operator looks for it there.
	for _, s := range cfg.StageNames() {
		if lines[s] == nil {
			lines[s] = &line{n: map[queue.Status]int64{}}
			order = append(order, s)
		}
	}
	slices.Sort(order)
	for s, t := range due {
		if l := lines[s]; l != nil {
			l.due = t
		}
		if all.due.IsZero() || t.Before(all.due) {
			all.due = t
		}
	}
	rows := make([][]string, 0, len(order)+1)
	for _, s := range order {
		rows = append(rows, row(s, lines[s]))
	}
	rows = append(rows, row(allStages, all))
	if err := printTable(c.App.Writer, header, rows); err != nil {
		return err
	}
	for _, l := range unconfigured(cfg, admin.UnconfiguredIn(cfg.StageNames(), counts)) {
		if _, err := fmt.Fprintln(c.App.Writer, printable(l)); err != nil {
			return err
		}
	}
	if err := printEnqueued(c, db); err != nil {
		return err
	}
	for _, p := range paused {
		if _, err := fmt.Fprintf(c.App.Writer, "stage %s: %s\n", printable(p.Stage), pauseText(p, now)); err != nil {
			return err
		}
	}
	fks, err := db.FlowKeys(c.Context)
	if err != nil {
		return err
	}
	for _, k := range fks {
		// As the stage's dispatcher last set them (pepsi.flow_keys).
		if _, err := fmt.Fprintf(c.App.Writer, "stage %s: KEY = header:%s, KEY_LIMIT = %d\n", printable(k.Stage), printable(k.Header), k.Limit); err != nil {
			return err
		}
	}
	if d == nil {
		_, err = fmt.Fprintln(c.App.Writer, "dispatcher: not running")
		return err
	}
	if !d.Set {
		_, err = fmt.Fprintf(c.App.Writer, "dispatcher: running (%s)\n", printable(d.String()))
		return err
	}
	if _, err = fmt.Fprintln(c.App.Writer, "dispatchers: running, each owning a stage set"); err != nil {
		return err
	}
	return printOwners(c, db, cfg, order)
}

// printOwners prints a line per stage, those of the configuration and
// those in the queue: its owner, or that it has none (its messages wait).
func printOwners(c *cli.Context, db *admin.DB, cfg *config.Config, inQueue []string) error {
	stages := cfg.StageNames()
	for _, s := range inQueue {
		if !slices.Contains(stages, s) {
			stages = append(stages, s)
		}
	}
	owners, err := db.Owners(c.Context, stages)
	if err != nil {
		return err
	}
	for _, s := range stages {
		o, ok := owners[s]
		switch {
		case !ok:
			_, err = fmt.Fprintf(c.App.Writer, "stage %s: no owner (its messages wait)\n", printable(s))
		case o.Name != "":
			_, err = fmt.Fprintf(c.App.Writer, "stage %s: owned by %s\n", printable(s), printable(o.Name))
		default:
			_, err = fmt.Fprintf(c.App.Writer, "stage %s: owned by server pid %d\n", printable(s), o.PID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unconfigured returns a line for each stage with messages waiting that
// the configuration lacks (admin.UnconfiguredIn): no dispatcher hands them
// out, and nothing else says so.
func unconfigured(cfg *config.Config, stages []admin.StageMessages) []string {
	lines := make([]string, 0, len(stages))
	for _, m := range stages {
		verb := "wait"
		if m.N == 1 {
			verb = "waits"
		}
		lines = append(lines, fmt.Sprintf("no [stage-%s] in %s: %s %s there, handed to no worker until it is configured",
			m.Stage, cfg.Path, plural(m.N, "message"), verb))
	}
	return lines
}
