package peers

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// The targets of the real work (issue 51; the plain stage's, issue 34).
const (
	targetWorkRiver   = 2.5  // pkg/worker stage, defaults ÷ River
	targetWorkCeiling = 0.6  // pkg/worker stage, defaults ÷ the pgbench ceiling of its shape (with its read)
	targetWorkTuned   = 0.85 // defaults ÷ QUEUE_LIMIT 32
	targetWorkPlain   = 1.3  // one-statement-per-round-trip stage ÷ River
	targetWorkKit     = 2.0  // the Python package's stage as README shows it, defaults ÷ River
	targetWorkCPU     = 350  // µs of CPU a pass, the pepsi side and the server, pkg/worker stage, defaults
)

// The pepsi configurations of the real work: the seed's defaults
// (QUEUE_LIMIT 4, MAX_MESSAGES 1000, PARALLELISM 4) and the tuned one.
var (
	workDefaults = pepsiWork{kind: "worker", label: "pepsi, pkg/worker stage, defaults (PARALLELISM 4, QUEUE_LIMIT 4, MAX_MESSAGES 1000)", parallelism: 4, queueLimit: 4, maxMessages: 1000}
	workTuned    = pepsiWork{kind: "worker", label: "pepsi, pkg/worker stage, tuned (PARALLELISM 4, QUEUE_LIMIT 32, MAX_MESSAGES 1 000 000)", parallelism: 4, queueLimit: 32, maxMessages: 1_000_000}
	workPlain    = pepsiWork{kind: "plain", label: "pepsi, plain pgx stage, one statement per round trip, defaults", parallelism: 4, queueLimit: 4, maxMessages: 1000}
	// The pkg/worker stage in one round trip a pass (worker.OneTrip).
	workOneTrip      = pepsiWork{kind: "worker-onetrip", label: "pepsi, pkg/worker stage, one round trip (worker.OneTrip), defaults", parallelism: 4, queueLimit: 4, maxMessages: 1000}
	workOneTripTuned = pepsiWork{kind: "worker-onetrip", label: "pepsi, pkg/worker stage, one round trip (worker.OneTrip), tuned", parallelism: 4, queueLimit: 32, maxMessages: 1_000_000}
	workPython       = pepsiWork{kind: "python", label: "pepsi, Python (psycopg2) stage like contrib/python/stage.py, defaults", parallelism: 4, queueLimit: 4, maxMessages: 1000}
	// The same two in one round trip a pass (pepsi-worker(7) EXAMPLES).
	workPlain1  = pepsiWork{kind: "plain-onetrip", label: "pepsi, plain pgx stage, one round trip (pgx.Batch of the two statements), defaults", parallelism: 4, queueLimit: 4, maxMessages: 1000}
	workPython1 = pepsiWork{kind: "python-onetrip", label: "pepsi, Python (psycopg2) stage, one round trip like contrib/python/onetrip.py, defaults", parallelism: 4, queueLimit: 4, maxMessages: 1000}
	// The Python package (contrib/python, psycopg2), as README shows a stage.
	workKit = pepsiWork{kind: "python-kit", label: "pepsi, Python package pepsi-stage (psycopg2) stage as README shows it, defaults", parallelism: 4, queueLimit: 4, maxMessages: 1000}
	// The TypeScript package (contrib/node, pg), as its README shows a stage.
	workNodeKit = pepsiWork{kind: "node-kit", label: "pepsi, TypeScript package @pepsi/stage (pg) stage as its README shows it, defaults", parallelism: 4, queueLimit: 4, maxMessages: 1000}
)

var pgbenchClients = []int{6, 12}

// workSystems are the real-work step's systems, for --work-systems.
var workSystems = []string{"river", "default", "tuned", "onetrip", "onetrip-tuned", "plain", "plain-onetrip", "python", "python-onetrip", "python-kit", "node-kit", "pgbench"}

func (o workOptions) want(sys string) bool {
	return o.Systems == nil || slices.Contains(o.Systems, sys)
}

// workRun holds the real-work step's figures over the runs.
type workRun struct {
	dir, self, python                string
	kitPython, noKit                 string // the package's python; why there is none
	nodeKit, noNodeKit               string // where @pepsi/stage is installed; why it is not
	river, def, tuned, plain, plain1 *series
	one, oneTuned, py, py1, kit      *series
	node                             *series
	pg, pgRead                       []*series
	costs                            map[*series]*workCost // per pepsi system run
}

// workCost is a pepsi system's cost per pass over the runs.
type workCost struct {
	pepsi, server, versions, walBytes, walRecords series
}

func (w *workRun) addCost(s *series, r workResult) {
	c := w.costs[s]
	if c == nil {
		c = &workCost{}
		w.costs[s] = c
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(r.passes) }
	c.pepsi.add(per(r.cost.pepsi))
	c.server.add(per(r.cost.server))
	c.walBytes.add(float64(r.cost.walBytes) / float64(r.passes))
	c.walRecords.add(float64(r.cost.walRecords) / float64(r.passes))
	if r.versions > 0 {
		c.versions.add(r.versions)
	}
}

func newWorkRun(o options) (*workRun, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pepsi-bench-peers-work-")
	if err != nil {
		return nil, err
	}
	w := &workRun{dir: dir, self: self, python: findPython(o.work.Python),
		river:    &series{name: fmt.Sprintf("River %s as a library, 3 chained job kinds (UPDATE, InsertTx, JobCompleteTx in one tx), MaxWorkers %d, pool %d", riverVersion, o.work.RiverWorkers, o.work.RiverMaxConns), unit: "passes/s"},
		def:      &series{name: workDefaults.label, unit: "passes/s"},
		tuned:    &series{name: workTuned.label, unit: "passes/s"},
		one:      &series{name: workOneTrip.label, unit: "passes/s"},
		oneTuned: &series{name: workOneTripTuned.label, unit: "passes/s"},
		plain:    &series{name: workPlain.label, unit: "passes/s"},
		py:       &series{name: workPython.label, unit: "passes/s"},
		plain1:   &series{name: workPlain1.label, unit: "passes/s"},
		py1:      &series{name: workPython1.label, unit: "passes/s"},
		kit:      &series{name: workKit.label, unit: "passes/s"},
		node:     &series{name: workNodeKit.label, unit: "passes/s"},
		costs:    map[*series]*workCost{},
	}
	if o.work.want("python-kit") {
		w.kitPython, w.noKit = kitPython(dir, o.work.KitSource)
	}
	if o.work.want("node-kit") {
		w.nodeKit, w.noNodeKit = kitNode(dir, o.work.NodeKitSource)
	}
	for _, c := range pgbenchClients {
		w.pg = append(w.pg, &series{name: fmt.Sprintf("pgbench, same transaction shape, %d clients (the ceiling)", c), unit: "tx/s"})
	}
	for _, c := range pgbenchClients {
		w.pgRead = append(w.pgRead, &series{name: fmt.Sprintf("pgbench, same shape with the message's read, %d clients (the default stage's ceiling)", c), unit: "tx/s"})
	}
	return w, nil
}

// run runs every system once, in order, each on a fresh database.
func (w *workRun) run(ctx context.Context, i int, exe string, o options, progress func(string, ...any)) error {
	if o.work.want("river") {
		progress("run %d of %d: realwork: River chain", i, o.runs)
		r, err := runRiverWork(ctx, o.dsn, o.work.Database, o.work, o.river, progress)
		if err != nil {
			return fmt.Errorf("realwork, River: %w", err)
		}
		w.river.add(r.rate())
		progress("run %d: realwork: River: %s passes/s (%d in %v)", i, num(r.rate()), r.passes, r.elapsed.Round(time.Millisecond))
	}
	for _, c := range []struct {
		sys string
		cfg pepsiWork
		s   *series
	}{{"default", workDefaults, w.def}, {"tuned", workTuned, w.tuned},
		{"onetrip", workOneTrip, w.one}, {"onetrip-tuned", workOneTripTuned, w.oneTuned}, {"plain", workPlain, w.plain},
		{"plain-onetrip", workPlain1, w.plain1}, {"python", workPython, w.py}, {"python-onetrip", workPython1, w.py1}, {"python-kit", workKit, w.kit}, {"node-kit", workNodeKit, w.node}} {
		if !o.work.want(c.sys) {
			continue
		}
		if c.cfg.kind == "python-kit" && w.kitPython == "" {
			progress("realwork: the Python package's stage is skipped: %s", w.noKit)
			continue
		}
		if c.cfg.kind == "node-kit" && w.nodeKit == "" {
			progress("realwork: the TypeScript package's stage is skipped: %s", w.noNodeKit)
			continue
		}
		if strings.HasPrefix(c.cfg.kind, "python") && c.cfg.kind != "python-kit" && w.python == "" {
			progress("realwork: no python3 with psycopg2: the Python stage (%s) is skipped", c.sys)
			continue
		}
		o2 := o.work
		o2.Python, o2.KitPython, o2.NodeKit = w.python, w.kitPython, w.nodeKit
		r, err := runPepsiWork(ctx, exe, w.self, w.dir, o.dsn, o2, c.cfg, progress)
		if err != nil {
			return fmt.Errorf("realwork, %s: %w", c.cfg.label, err)
		}
		c.s.add(r.rate())
		w.addCost(c.s, r)
		progress("run %d: realwork: %s: %s passes/s (%d in %v)", i, c.cfg.label, num(r.rate()), r.passes, r.elapsed.Round(time.Millisecond))
	}
	if !o.work.want("pgbench") {
		return nil
	}
	progress("run %d of %d: realwork: pgbench ceiling at %v clients, %d s each", i, o.runs, pgbenchClients, o.work.PgbenchSeconds)
	tps, tpsRead, err := runPgbench(ctx, o.dsn, o.work.Database, w.dir, o.work, pgbenchClients)
	if err != nil {
		return fmt.Errorf("realwork, pgbench: %w", err)
	}
	for j, v := range tps {
		w.pg[j].add(v)
	}
	for j, v := range tpsRead {
		w.pgRead[j].add(v)
	}
	progress("run %d: realwork: pgbench: %v tx/s, with the read %v", i, tps, tpsRead)
	return nil
}

// ceiling is the higher of the pgbench medians of the shape without the
// read (OneTrip's), ceilingRead of the shape with it (the default mode's).
func (w *workRun) ceiling() float64 { return highest(w.pg) }

func (w *workRun) ceilingRead() float64 { return highest(w.pgRead) }

func highest(ss []*series) float64 {
	c := 0.0
	for _, s := range ss {
		if len(s.values) > 0 {
			c = max(c, s.median())
		}
	}
	return c
}

func (w *workRun) report(out io.Writer, o options) {
	fmt.Fprintf(out, "\nReal work (issue 34): %d messages (River: chains) through 3 stages; every pass one transaction holding\n", o.work.Messages)
	fmt.Fprintln(out, "UPDATE acct SET n = n + 1 WHERE id = id % 10000 + 1 and the move to the next stage; each system on a fresh database.")
	fmt.Fprintln(out, "passes/s = 3 × messages ÷ (first created → last done, by the server's clock); ceiling = the higher pgbench median")
	fmt.Fprintln(out, "of the same shape: with the message's read for the stages that read it (pkg/worker's default mode), without for the others.")
	fmt.Fprintln(out)
	riv, ceil, ceilRead := w.river.median(), w.ceiling(), w.ceilingRead()
	if ceilRead <= 0 {
		ceilRead = ceil
	}
	ratio := func(v, of float64) string {
		if of <= 0 || v != v || of != of {
			return "-"
		}
		return fmt.Sprintf("%.2f", v/of)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SYSTEM\tPASSES/S (MEDIAN)\t÷ RIVER\t÷ CEILING\tRUNS")
	reads := []*series{w.def, w.tuned, w.py, w.kit, w.node}
	for _, s := range append(append([]*series{w.river, w.def, w.tuned, w.one, w.oneTuned, w.plain, w.plain1, w.py, w.py1, w.kit, w.node}, w.pg...), w.pgRead...) {
		if len(s.values) == 0 {
			continue
		}
		c := ceil
		if slices.Contains(reads, s) || slices.Contains(w.pgRead, s) {
			c = ceilRead
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.name, num(s.median()), ratio(s.median(), riv), ratio(s.median(), c), runsList(s))
	}
	tw.Flush()
	w.reportCost(out)
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET (real work)\tMEASURED\tWANT\t")
	target := func(name string, v, of, want float64) {
		if of <= 0 || v != v || of != of {
			fmt.Fprintf(tw, "%s\t-\t≥ %g\tnot measured\n", name, want)
			return
		}
		r := v / of
		fmt.Fprintf(tw, "%s\t%.2f\t≥ %g\t%s\n", name, r, want, met(r >= want))
	}
	def := w.def.median()
	target("pkg/worker stage, defaults ÷ River", def, riv, targetWorkRiver)
	target("pkg/worker stage, defaults ÷ pgbench ceiling with the read", def, ceilRead, targetWorkCeiling)
	target("pkg/worker stage, defaults ÷ QUEUE_LIMIT 32", def, w.tuned.median(), targetWorkTuned)
	if len(w.one.values) > 0 {
		one := w.one.median()
		target("pkg/worker OneTrip stage, defaults ÷ River", one, riv, targetWorkRiver)
		target("pkg/worker OneTrip stage, defaults ÷ pgbench ceiling", one, ceil, targetWorkCeiling)
		target("pkg/worker OneTrip stage, defaults ÷ its QUEUE_LIMIT 32", one, w.oneTuned.median(), targetWorkTuned)
	}
	target("plain pgx one-statement stage ÷ River", w.plain.median(), riv, targetWorkPlain)
	if len(w.py.values) > 0 {
		target("Python one-statement stage ÷ River", w.py.median(), riv, targetWorkPlain)
	}
	if len(w.kit.values) > 0 {
		target("Python package stage, defaults ÷ River", w.kit.median(), riv, targetWorkKit)
	}
	if len(w.node.values) > 0 {
		fmt.Fprintf(tw, "TypeScript package stage, defaults ÷ River\t%s\t(no target)\t\n", ratioText(w.node.median(), riv))
	}
	if c := w.costs[w.def]; c != nil {
		cpu := c.pepsi.median() + c.server.median()
		fmt.Fprintf(tw, "CPU per pass, pkg/worker stage, defaults (µs)\t%.0f\t≤ %d\t%s\n", cpu, targetWorkCPU, met(cpu <= targetWorkCPU))
	}
	tw.Flush()
}

// reportCost prints the pepsi systems' cost per pass, medians of the runs.
func (w *workRun) reportCost(out io.Writer) {
	if len(w.costs) == 0 {
		return
	}
	fmt.Fprintln(out, "\nCost per pass, medians: CPU of the pepsi side (the dispatcher and its stage programs) and of the server")
	fmt.Fprintln(out, "(the run's database's backends), from the end of the warm-up to the last message done; row versions")
	fmt.Fprintln(out, "written into pepsi.state per pass (less each message's first); the cluster's WAL (every database's).")
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SYSTEM\tPEPSI µs\tSERVER µs\tTOTAL µs\tROW VERSIONS\tWAL BYTES\tWAL RECORDS")
	for _, s := range []*series{w.def, w.tuned, w.one, w.oneTuned, w.plain, w.plain1, w.py, w.py1, w.kit, w.node} {
		c := w.costs[s]
		if c == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.2f\t%.0f\t%.1f\n", s.name, c.pepsi.median(), c.server.median(),
			c.pepsi.median()+c.server.median(), c.versions.median(), c.walBytes.median(), c.walRecords.median())
	}
	tw.Flush()
}

// ratioText is v ÷ of with two decimals, or "-" when either is unknown.
func ratioText(v, of float64) string {
	if of <= 0 || v != v || of != of {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/of)
}
