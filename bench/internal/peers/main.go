// Package peers is pepsi-bench-peers: it measures pepsi beside River
// (github.com/riverqueue/river) on the same server, in one run: River's
// own `river bench` workload (N no-op jobs inserted, then a client with
// 2 000 workers works them), pepsi's equal work (N messages through one
// no-op status-line stage with 64 workers, pepsi-bench's wide step), the
// same through three stages, and the database's commit ceiling. Each
// system gets a fresh database that is dropped afterwards; every step runs
// --runs times, interleaved, and the medians are reported beside every
// run's figure. See bench/cmd/pepsi-bench-peers/README.md.
//
// It lives in the bench module so that River stays out of pepsi's go.mod;
// it runs pepsi through its binaries (pepsi-bench --format json, whose
// dispatcher is --pepsi's pepsi dispatch).
//
//	make bench-peers                        # from the repository's root
//	bin/pepsi-bench-peers --pepsi bin/pepsi --pepsi-bench bin/pepsi-bench --runs 1 --messages 50000
package peers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// The targets.
const (
	targetRatio  = 2.5    // pepsi one stage ÷ River, jobs (passes) per second (issue 51)
	targetPasses = 30_000 // pepsi, three stages, stage passes per second
)

var steps = []string{"river", "pepsi1", "pepsi3", "ceiling", "realwork"}

type options struct {
	dsn           string
	pepsi         string
	pepsiBench    string
	messages      int
	runs          int
	riverDatabase string
	pepsiDatabase string
	timeout       time.Duration
	only          []string
	river         riverOptions
	work          workOptions
}

// Main runs pepsi-bench-peers with arguments args (after the program's
// name) and returns the exit status.
func Main(args []string) int {
	if len(args) > 0 && args[0] == "stage" {
		// The real-work pipelines' stage program (PROGRAM in the
		// pepsi.conf that the realwork step writes).
		return stageMain(args[1:])
	}
	o, err := parseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pepsi-bench-peers:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pepsi-bench-peers:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("pepsi-bench-peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pepsi-bench-peers [--messages N] [--runs R] [--pepsi PATH] [--pepsi-bench PATH] [options]")
		fmt.Fprintln(stderr, "Measures pepsi beside River on the server of --dsn (default $PEPSI_DSN). See bench/cmd/pepsi-bench-peers/README.md.")
		fs.PrintDefaults()
	}
	defDSN := os.Getenv("PEPSI_DSN")
	if defDSN == "" {
		defDSN = "postgres:///postgres?host=/var/run/postgresql"
	}
	fs.StringVar(&o.dsn, "dsn", defDSN, "the server (its database is only used to connect); default $PEPSI_DSN")
	fs.StringVar(&o.pepsi, "pepsi", "", "the pepsi binary (default $PEPSI_BIN, else pepsi beside this program, else bin/pepsi of the repository, else pepsi on PATH)")
	fs.StringVar(&o.pepsiBench, "pepsi-bench", "", "the pepsi-bench binary that measures pepsi (default pepsi-bench beside this program, else bin/pepsi-bench of the repository, else pepsi-bench on PATH)")
	fs.IntVar(&o.messages, "messages", 200_000, "N: River jobs, and pepsi messages per pipeline")
	fs.IntVar(&o.runs, "runs", 3, "R: runs of every step (the median counts)")
	fs.StringVar(&o.riverDatabase, "river-database", "pepsi_peers_river", "River's database (dropped first if it exists, and afterwards)")
	fs.StringVar(&o.pepsiDatabase, "pepsi-database", "pepsi_peers_pepsi", "pepsi-bench's --database")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "the longest one step of one run may take")
	only := fs.String("only", "", "run only these steps, comma-separated: "+strings.Join(steps, ","))
	fs.IntVar(&o.river.Workers, "river-workers", 2_000, "MaxWorkers of River's default queue (river bench: 2000)")
	fs.DurationVar(&o.river.FetchCooldown, "river-fetch-cooldown", 2*time.Millisecond, "River's FetchCooldown (river bench: 2ms; River's default 100ms)")
	fs.DurationVar(&o.river.FetchPollInterval, "river-fetch-poll-interval", 20*time.Millisecond, "River's FetchPollInterval (river bench: 20ms; River's default 1s)")
	fs.IntVar(&o.river.BatchSize, "river-batch", 5_000, "jobs per River insert (river bench: 5000)")
	fs.BoolVar(&o.river.InsertFast, "river-insert-fast", false, "insert with InsertManyFast (COPY) instead of InsertMany (river bench)")
	fs.IntVar(&o.river.MaxConns, "river-max-conns", 0, "MaxConns of River's pgx pool; 0: pgxpool's default, max(4, CPUs), as river bench")
	fs.IntVar(&o.work.Messages, "work-messages", 20_000, "realwork: messages (River: chains) through 3 stages")
	fs.StringVar(&o.work.Database, "work-database", "pepsi_peers_work", "realwork: the database of each system's run (dropped first if it exists, and afterwards)")
	fs.IntVar(&o.work.RiverWorkers, "work-river-workers", 50, "realwork: River's MaxWorkers")
	fs.IntVar(&o.work.RiverMaxConns, "work-river-max-conns", 12, "realwork: MaxConns of River's pgx pool")
	fs.StringVar(&o.work.Python, "python", "", "realwork: a python3 with psycopg2 for the Python stage (default /usr/bin/python3, else python3; none: the Python stage is skipped)")
	fs.StringVar(&o.work.KitSource, "python-kit", "contrib/python", "realwork: the Python package pepsi-stage to install into a virtualenv (with Debian's python3-psycopg2) for its stage")
	fs.StringVar(&o.work.NodeKitSource, "node-kit", "contrib/node", "realwork: the TypeScript package @pepsi/stage to install (npm, with pg from the registry) for its stage")
	fs.IntVar(&o.work.PgbenchSeconds, "pgbench-seconds", 10, "realwork: seconds of each pgbench ceiling")
	fs.DurationVar(&o.work.RiverFetchCooldown, "work-river-fetch-cooldown", 2*time.Millisecond, "realwork: River's FetchCooldown (it also spaces InsertTx's NOTIFY)")
	fs.DurationVar(&o.work.RiverVacuum, "work-river-vacuum", 2*time.Second, "realwork: VACUUM ANALYZE river_job this often beside River's chain, for autovacuum (0: never)")
	systems := fs.String("work-systems", "", "realwork: run only these systems, comma-separated: "+strings.Join(workSystems, ","))
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *systems != "" {
		for _, s := range strings.Split(*systems, ",") {
			if !slices.Contains(workSystems, s) {
				return o, fmt.Errorf("--work-systems: no system %q (systems: %s)", s, strings.Join(workSystems, ", "))
			}
			o.work.Systems = append(o.work.Systems, s)
		}
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.messages < 1 || o.runs < 1 || o.river.Workers < 1 || o.river.BatchSize < 1 || o.river.MaxConns < 0 {
		return o, errors.New("--messages, --runs, --river-workers and --river-batch must be at least 1, --river-max-conns not negative")
	}
	if o.timeout <= 0 {
		return o, errors.New("--timeout must be positive")
	}
	o.river.Timeout = o.timeout
	o.work.Timeout = o.timeout
	if o.work.Messages < 1 || o.work.RiverWorkers < 1 || o.work.RiverMaxConns < 1 || o.work.PgbenchSeconds < 1 {
		return o, errors.New("--work-messages, --work-river-workers, --work-river-max-conns and --pgbench-seconds must be at least 1")
	}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			if !slices.Contains(steps, s) {
				return o, fmt.Errorf("--only: no step %q (steps: %s)", s, strings.Join(steps, ", "))
			}
			o.only = append(o.only, s)
		}
	}
	if o.work.Database == o.riverDatabase || o.work.Database == o.pepsiDatabase {
		return o, errors.New("--work-database must differ from --river-database and --pepsi-database")
	}
	if o.riverDatabase == o.pepsiDatabase {
		return o, errors.New("--river-database and --pepsi-database must differ")
	}
	return o, nil
}

// findExe resolves the binary called name (pepsi, pepsi-bench): the first
// of given that is not empty, else name beside this program, else
// bin/NAME from the repository's root or from bench/, else name on PATH.
func findExe(name string, given ...string) (string, error) {
	for _, g := range given {
		if g == "" {
			continue
		}
		if st, err := os.Stat(g); err != nil || st.IsDir() {
			return "", fmt.Errorf("%s binary %s: not a file (make bench-peers makes bin/%s)", name, g, name)
		}
		return filepath.Abs(g)
	}
	var candidates []string
	if self, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(self), name))
	}
	for _, c := range append(candidates, filepath.Join("bin", name), filepath.Join("..", "bin", name)) {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return filepath.Abs(c)
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("no %s binary: give --%s PATH (make bench-peers makes bin/%s)", name, name, name)
	}
	return p, nil
}

// series is one figure over the runs.
type series struct {
	name   string
	unit   string
	values []float64
}

func (s *series) add(v float64) { s.values = append(s.values, v) }

func (s *series) median() float64 {
	if len(s.values) == 0 {
		return math.NaN()
	}
	v := slices.Clone(s.values)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	want := func(step string) bool { return o.only == nil || slices.Contains(o.only, step) }
	exe, exeFrom, version, lab, labFrom := "", "", "", "", ""
	if want("pepsi1") || want("pepsi3") || want("ceiling") || want("realwork") {
		var err error
		if exe, err = findExe("pepsi", o.pepsi, os.Getenv("PEPSI_BIN")); err != nil {
			return err
		}
		// Copies, so that a rebuild of bin/pepsi or bin/pepsi-bench during
		// the run (make build in the same checkout) cannot change the
		// binaries between runs or under a running pepsi-bench.
		dir, err := os.MkdirTemp("", "pepsi-bench-peers-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		exeFrom = exe
		if exe, err = copyExe(exe, filepath.Join(dir, "pepsi")); err != nil {
			return err
		}
		version = pepsiVersion(ctx, exe)
		if want("pepsi1") || want("pepsi3") || want("ceiling") {
			if lab, err = findExe("pepsi-bench", o.pepsiBench); err != nil {
				return err
			}
			labFrom = lab
			if lab, err = copyExe(lab, filepath.Join(dir, "pepsi-bench")); err != nil {
				return err
			}
		}
	}
	var work *workRun
	if want("realwork") {
		var err error
		if work, err = newWorkRun(o); err != nil {
			return err
		}
		defer os.RemoveAll(work.dir)
	}
	started := time.Now()
	progress := func(format string, args ...any) {
		fmt.Fprintf(stderr, "peers: %s (load %.1f, %s)\n", fmt.Sprintf(format, args...), loadAvg(), time.Since(started).Round(time.Second))
	}
	info, err := readServerInfo(ctx, o.dsn)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	load0 := loadAvg()
	k1 := fmt.Sprintf("1 no-op status-line stage, %d messages, 64 workers", o.messages)
	k3 := fmt.Sprintf("3 no-op status-line stages, %d messages, 64 workers", o.messages)
	var (
		riverJobs   = &series{name: fmt.Sprintf("River: %d no-op jobs, %d workers (river bench's workload)", o.messages, o.river.Workers), unit: "jobs/s"}
		riverInsert = &series{name: fmt.Sprintf("River: insert of the %d jobs (%s, %d per batch), not timed above", o.messages, insertName(o.river.InsertFast), o.river.BatchSize), unit: "jobs/s"}
		riverClient = &series{name: "River: client process CPU per job (fetch, work, complete)", unit: "µs"}
		riverDB     = &series{name: "River: database backends' CPU per job", unit: "µs"}
		p1          = &series{name: "pepsi: " + k1 + ": stage passes (= messages)", unit: "passes/s"}
		p1Turn      = &series{name: "pepsi: the same, the dispatcher's statements alone (RunTurn, no workers)", unit: "passes/s"}
		p1CPU       = &series{name: "pepsi: the same, dispatcher CPU per pass", unit: "µs"}
		p3          = &series{name: "pepsi: " + k3 + ": stage passes", unit: "passes/s"}
		p3Msg       = &series{name: "pepsi: the same, messages through all 3 stages", unit: "msg/s"}
		p3Turn      = &series{name: "pepsi: the same, the dispatcher's statements alone (RunTurn, no workers)", unit: "passes/s"}
		ceil1       = &series{name: "commit ceiling, 1 connection (single-row UPDATE commits)", unit: "tx/s"}
		ceilC       = &series{name: "commit ceiling, C connections", unit: "tx/s"}
		ratios      = &series{name: "pepsi one stage ÷ River, same run", unit: "×"}
	)
	for i := 1; i <= o.runs; i++ {
		var rr, r1 float64
		if want("river") {
			progress("run %d of %d: River", i, o.runs)
			res, err := runRiver(ctx, o.dsn, o.riverDatabase, o.messages, o.river, progress)
			if err != nil {
				return err
			}
			rr = res.rate()
			riverJobs.add(rr)
			riverInsert.add(res.insertRate)
			if res.clientCPU > 0 {
				riverClient.add(float64(res.clientCPU.Microseconds()) / float64(res.jobs))
			}
			if res.backendCPU > 0 {
				riverDB.add(float64(res.backendCPU.Microseconds()) / float64(res.jobs))
			}
			progress("run %d: River: %s jobs/s (%d jobs in %v, the first done %v after the start; load %.1f)",
				i, num(rr), res.jobs, res.elapsed.Round(time.Millisecond), res.first.Round(time.Millisecond), res.load)
		}
		if want("pepsi1") {
			progress("run %d of %d: pepsi-bench --only wide --stages 1 --messages %d", i, o.runs, o.messages)
			f, rep, err := pepsiStages(ctx, lab, exe, o.dsn, o.pepsiDatabase, 1, o.messages, o.timeout)
			if err != nil {
				return err
			}
			r1 = *f.Value
			p1.add(r1)
			if f.Ceiling != nil {
				p1Turn.add(*f.Ceiling)
			}
			if c, err := rep.figure("wide.cpu"); err == nil {
				p1CPU.add(*c.Value)
			}
			progress("run %d: pepsi, 1 stage: %s passes/s", i, num(r1))
		}
		if rr > 0 && r1 > 0 {
			ratios.add(r1 / rr)
		}
		if want("pepsi3") {
			progress("run %d of %d: pepsi-bench --only wide --stages 3 --messages %d", i, o.runs, o.messages)
			f, _, err := pepsiStages(ctx, lab, exe, o.dsn, o.pepsiDatabase, 3, o.messages, o.timeout)
			if err != nil {
				return err
			}
			p3.add(*f.Value)
			p3Msg.add(*f.Value / 3)
			if f.Ceiling != nil {
				p3Turn.add(*f.Ceiling)
			}
			progress("run %d: pepsi, 3 stages: %s passes/s", i, num(*f.Value))
		}
		if want("ceiling") {
			progress("run %d of %d: pepsi-bench --only ceiling", i, o.runs)
			rep, err := runPepsiBench(ctx, lab, exe, o.dsn, o.pepsiDatabase, o.timeout, "--only", "ceiling")
			if err != nil {
				return err
			}
			f1, err := rep.figure("ceiling.1")
			if err != nil {
				return err
			}
			fc, err := rep.figure("ceiling.c")
			if err != nil {
				return err
			}
			ceil1.add(*f1.Value)
			ceilC.add(*fc.Value)
			ceilC.name = "commit ceiling, " + strings.TrimPrefix(fc.Name, "commit ceiling, ") + " (single-row UPDATE commits)"
		}
		if want("realwork") {
			if err := work.run(ctx, i, exe, o, progress); err != nil {
				return err
			}
		}
	}

	w := stdout
	fmt.Fprintf(w, "pepsi bench peers: pepsi beside River, %s\n", started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "  %d CPUs, load %.1f at the start, %.1f at the end; PostgreSQL %s (synchronous_commit %s, fsync %s, autovacuum %s, max_connections %d)\n",
		runtime.NumCPU(), load0, loadAvg(), info.Version, info.SynchronousCommit, info.Fsync, info.Autovacuum, info.MaxConnections)
	noop := want("river") || want("pepsi1") || want("pepsi3") || want("ceiling")
	if noop {
		fmt.Fprintf(w, "  N = %d jobs (River) and messages (pepsi); runs: %d, interleaved; the median of them, then every run's figure\n", o.messages, o.runs)
		fmt.Fprintf(w, "  River %s: MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v, pool MaxConns %s; jobs inserted before the client starts\n",
			riverVersion, o.river.Workers, o.river.FetchCooldown, o.river.FetchPollInterval, maxConnsName(o.river.MaxConns))
	}
	if want("realwork") {
		fmt.Fprintf(w, "  realwork: N = %d messages (River: chains), 3 stages; runs: %d, interleaved; River MaxWorkers %d, pool MaxConns %d, FetchCooldown %v, FetchPollInterval %v, VACUUM ANALYZE river_job every %v; pgbench %d s per client count\n",
			o.work.Messages, o.runs, o.work.RiverWorkers, o.work.RiverMaxConns, o.work.RiverFetchCooldown, max(o.river.FetchPollInterval, o.work.RiverFetchCooldown), o.work.RiverVacuum, o.work.PgbenchSeconds)
	}
	if exe != "" {
		fmt.Fprintf(w, "  pepsi: %s, copied at the start (%s)\n", exeFrom, version)
	}
	if lab != "" {
		fmt.Fprintf(w, "  pepsi-bench: %s, copied at the start\n", labFrom)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if noop {
		fmt.Fprintln(tw, "FIGURE\tMEDIAN\tRUNS")
	}
	for _, s := range []*series{riverJobs, riverInsert, riverClient, riverDB, p1, p1Turn, p1CPU, p3, p3Msg, p3Turn, ceil1, ceilC} {
		if len(s.values) == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s\n", s.name, num(s.median()), s.unit, runsList(s))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if (len(riverJobs.values) > 0 && len(p1.values) > 0) || len(p3.values) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "TARGET\tMEASURED\tWANT\t\tRUNS")
	}
	if len(riverJobs.values) > 0 && len(p1.values) > 0 {
		r := p1.median() / riverJobs.median()
		fmt.Fprintf(tw, "pepsi one stage ÷ River (medians)\t%.2f\t≥ %.1f\t%s\t%s\n", r, targetRatio, met(r >= targetRatio), runsList(ratios))
	}
	if len(p3.values) > 0 {
		v := p3.median()
		fmt.Fprintf(tw, "pepsi three stages, stage passes/s\t%s\t≥ %s\t%s\t%s\n", num(v), num(targetPasses), met(v >= targetPasses), runsList(p3))
	}
	tw.Flush()
	if work != nil {
		work.report(w, o)
	}
	fmt.Fprintf(w, "\npepsi bench peers took %s\n", time.Since(started).Round(time.Second))
	return nil
}

const riverVersion = "v0.51.2"

func maxConnsName(n int) string {
	if n == 0 {
		return fmt.Sprintf("%d (pgxpool's default)", max(4, runtime.NumCPU()))
	}
	return fmt.Sprint(n)
}

// copyExe copies the executable from to to.
func copyExe(from, to string) (string, error) {
	b, err := os.ReadFile(from)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		return "", err
	}
	return to, nil
}

func pepsiVersion(ctx context.Context, exe string) string {
	out, err := exec.CommandContext(ctx, exe, "--version").Output()
	if err != nil {
		return "version unknown"
	}
	return strings.TrimSpace(string(out))
}

func met(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

func runsList(s *series) string {
	parts := make([]string, len(s.values))
	for i, v := range s.values {
		if s.unit == "×" {
			parts[i] = fmt.Sprintf("%.2f", v)
		} else {
			parts[i] = num(v)
		}
	}
	return strings.Join(parts, " / ")
}

// num formats a figure with three significant digits, thousands spaced
// (as pepsi-bench does).
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "-"
	case a == 0:
		return "0"
	case a >= 1000:
		s := fmt.Sprintf("%.0f", v)
		var out []byte
		for i, c := range []byte(s) {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				out = append(out, ' ')
			}
			out = append(out, c)
		}
		return string(out)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
