// Command pepsi-bench measures pepsi's throughput and latencies against the
// database's own ceilings, on a database of its own (see pepsi-bench(1),
// bench/man/pepsi-bench.1; "make bench" runs it). The dispatcher it
// measures is "pepsi dispatch" of the pepsi executable --pepsi names; the
// stage programs of its pipelines are its own hidden subcommand,
// "pepsi-bench stage", which pepsi dispatch starts by this executable's
// path.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/bench/internal/lab"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// name is the command's name in its errors and help.
const name = "pepsi-bench"

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr, os.Stdin)) }

// run runs pepsi-bench with argv args and returns the exit status: 0, 1 on
// a runtime failure, 2 on a usage or configuration error. An error is one
// line on stderr, "pepsi-bench: message".
func run(args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	err := newApp(stdout, stderr, stdin).RunContext(context.Background(), args)
	return report(stderr, err)
}

// newApp builds the command line.
func newApp(stdout, stderr io.Writer, stdin io.Reader) *cli.App {
	d := lab.Defaults
	return &cli.App{
		Name:      name,
		HelpName:  name,
		Usage:     "measure pepsi's throughput and latencies against the database's own ceilings",
		UsageText: "pepsi-bench [--pepsi PATH] [--stages K] [--parallelism P] [--messages N] [options]",
		Description: "Creates a database of its own on the server of the configured DSN (or\n" +
			"PEPSI_DSN), --database, dropping it first if it exists, and measures: the\n" +
			"commit ceiling (single-row UPDATE transactions per second), pepsi enqueue,\n" +
			"the claim with many pending rows, a pipeline of K stages that each commit\n" +
			"one UPDATE plus the transition, the same with no-op stages that answer\n" +
			"their transition on the status line (also with --wide-workers workers),\n" +
			"the wake latency, and SQL ingress from an application's transaction\n" +
			"(pgbench: pepsi.enqueue() against the same transaction with a plain\n" +
			"INSERT); with --only rate, how closely a stage keeps RATE = 200/s.\n" +
			"Every figure is printed beside its ceiling, the ratio and the\n" +
			"target. The dispatcher runs as a child, \"pepsi dispatch\" of --pepsi,\n" +
			"so that its CPU time and peak RSS are its own; the stage programs are\n" +
			"\"pepsi-bench stage\". Progress goes to stderr, the report to stdout.\n" +
			"The database is dropped at the end unless --keep.",
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "pepsi", EnvVars: []string{"PEPSI_BENCH_EXE"}, TakesFile: true,
				Usage: "the pepsi executable `PATH` whose pepsi dispatch and pepsi enqueue are measured (default: pepsi beside pepsi-bench, else on PATH)"},
			&cli.StringFlag{Name: "database", Value: d.Database, Usage: "the benchmark's database `NAME` (dropped first if it exists)"},
			&cli.BoolFlag{Name: "keep", DisableDefaultText: true, Usage: "keep the database afterwards"},
			&cli.IntFlag{Name: "stages", Value: d.Stages, Usage: "`K` stages in the pipelines"},
			&cli.IntFlag{Name: "parallelism", Value: d.Parallelism, Usage: "`P` workers per stage in the commit and status-line pipelines"},
			&cli.IntFlag{Name: "queue-limit", Value: d.QueueLimit, Usage: "QUEUE_LIMIT `Q` of every stage"},
			&cli.IntFlag{Name: "commit-messages", Value: d.CommitMessages, Usage: "`N` messages through the commit pipeline"},
			&cli.IntFlag{Name: "messages", Value: d.Messages, Usage: "`N` messages through each status-line pipeline"},
			&cli.IntFlag{Name: "wide-workers", Value: d.WideWorkers, Usage: "`W` workers in the wide status-line run"},
			&cli.DurationFlag{Name: "ceiling-time", Value: d.CeilingTime, Usage: "how long each ceiling is measured (`DURATION`)"},
			&cli.IntFlag{Name: "wake-samples", Value: d.WakeSamples, Usage: "`N` single messages for the wake latency"},
			&cli.DurationFlag{Name: "load-time", Value: d.LoadTime, Usage: "how long messages are fed for the latency under load (`DURATION`)"},
			&cli.Float64Flag{Name: "load-fraction", Value: d.LoadFraction, Usage: "the feed rate under load, as a `FRACTION` of the measured throughput"},
			&cli.IntFlag{Name: "enqueue-messages", Value: d.EnqueueN, Usage: "`N` lines per pepsi enqueue run"},
			&cli.IntFlag{Name: "enqueue-runs", Value: d.EnqueueRuns, Usage: "`N` pepsi enqueue runs (the median counts)"},
			&cli.DurationFlag{Name: "ingress-time", Value: d.IngressTime, Usage: "how long each pgbench run of the ingress step lasts (`DURATION`, whole seconds)"},
			&cli.IntFlag{Name: "ingress-runs", Value: d.IngressRuns, Usage: "`N` pgbench runs of each ingress transaction (the median counts)"},
			&cli.IntFlag{Name: "claim-rows", Value: d.ClaimRows, Usage: "`N` pending rows for the large claim; 0 skips it"},
			&cli.DurationFlag{Name: "rate-time", Value: d.RateTime, Usage: "how long the rate step runs its stage at RATE = 200/s (`DURATION`, whole seconds)"},
			&cli.DurationFlag{Name: "sustained-time", Value: d.SustainedTime, Usage: "how long the sustained step feeds its pipeline (`DURATION`, whole minutes, at least 3m)"},
			&cli.StringFlag{Name: "only", Usage: "run only the steps in `LIST` (comma-separated: " + strings.Join(lab.Steps, ",") +
				"; without it, every step but " + strings.Join(lab.OnlyNamed, ",") + ")"},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "the report's `FORMAT` on stdout: table, or json (for programs)"},
		},
		Action: runBench,
		Commands: []*cli.Command{{
			Name:      "stage",
			Usage:     "the benchmark's stage program (pepsi-bench starts it through pepsi dispatch)",
			UsageText: "pepsi-bench stage [--mode tx|statusline] [--next STAGE]",
			Hidden:    true,
			Flags: []cli.Flag{
				configFlag(),
				&cli.StringFlag{Name: "mode", Value: "tx", Usage: "`MODE`: tx (one UPDATE and the transition, committed) or statusline (no-op, transition on the status line)"},
				&cli.StringFlag{Name: "next", Usage: "advance to `STAGE`; without it, finish"},
			},
			Action:       runStage,
			OnUsageError: onUsageError,
		}},
		HideHelpCommand: true,
		Writer:          stdout,
		ErrWriter:       stderr,
		Reader:          stdin,
		OnUsageError:    onUsageError,
		// Run returns every error; run prints it and picks the exit status.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// configFlag is -c/--config, as pepsi's commands have it.
func configFlag() cli.Flag {
	return &cli.StringFlag{
		Name:      "config",
		Aliases:   []string{"c"},
		Usage:     "read the configuration from `FILE` (default: $PEPSI_CONFIG, else " + config.DefaultPath + ")",
		TakesFile: true,
	}
}

func runBench(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	for _, name := range []string{"stages", "parallelism", "queue-limit", "commit-messages", "messages", "wide-workers", "wake-samples", "enqueue-messages", "enqueue-runs", "ingress-runs"} {
		if c.Int(name) < 1 {
			return usage("--%s %d: must be at least 1", name, c.Int(name))
		}
	}
	if c.Int("claim-rows") < 0 {
		return usage("--claim-rows %d: must not be negative", c.Int("claim-rows"))
	}
	if f := c.Float64("load-fraction"); f <= 0 || f > 1 {
		return usage("--load-fraction %g: want more than 0 and at most 1", f)
	}
	for _, name := range []string{"ceiling-time", "load-time", "ingress-time", "rate-time"} {
		if c.Duration(name) <= 0 {
			return usage("--%s %v: must be positive", name, c.Duration(name))
		}
	}
	if st := c.Duration("sustained-time"); st < 3*time.Minute || st%time.Minute != 0 {
		return usage("--sustained-time %v: want whole minutes, at least 3m", st)
	}
	format := c.String("format")
	if format != "table" && format != "json" {
		return usage("--format %q: want table or json", format)
	}
	var only []string
	if list := c.String("only"); list != "" {
		for _, step := range strings.Split(list, ",") {
			if !slices.Contains(lab.Steps, step) {
				return usage("--only: no step %q (steps: %s)", step, strings.Join(lab.Steps, ", "))
			}
			only = append(only, step)
		}
	}
	cfg, err := config.Resolve(c.String("config"), os.Getenv)
	if err != nil {
		return err
	}
	if _, err := pgx.ParseConfig(cfg.DSN); err != nil {
		return invalid("the DSN: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the pepsi-bench executable (the stage programs): %w", err)
	}
	exe, err := findPepsi(c.String("pepsi"), self)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	out := c.App.Writer
	if format == "json" {
		out = io.Discard // the table; the report is printed as JSON below
	}
	report, err := lab.Run(ctx, lab.Options{
		DSN: cfg.DSN, Database: c.String("database"), Keep: c.Bool("keep"), Exe: exe, StageExe: self,
		Out: out, Progress: c.App.ErrWriter,
		Stages: c.Int("stages"), Parallelism: c.Int("parallelism"), QueueLimit: c.Int("queue-limit"),
		CommitMessages: c.Int("commit-messages"), Messages: c.Int("messages"), WideWorkers: c.Int("wide-workers"),
		CeilingTime: c.Duration("ceiling-time"), WakeSamples: c.Int("wake-samples"),
		LoadTime: c.Duration("load-time"), LoadFraction: c.Float64("load-fraction"),
		EnqueueN: c.Int("enqueue-messages"), EnqueueRuns: c.Int("enqueue-runs"), ClaimRows: c.Int("claim-rows"),
		IngressTime: c.Duration("ingress-time"), IngressRuns: c.Int("ingress-runs"),
		RateTime: c.Duration("rate-time"), SustainedTime: c.Duration("sustained-time"), Only: only,
	})
	if err != nil || format != "json" {
		return err
	}
	return report.PrintJSON(c.App.Writer)
}

// findPepsi returns the pepsi executable to measure, as an absolute path:
// given (--pepsi or PEPSI_BENCH_EXE), else pepsi beside self (make bench
// builds both into bin/), else pepsi on PATH.
func findPepsi(given, self string) (string, error) {
	if given != "" {
		if st, err := os.Stat(given); err != nil || !st.Mode().IsRegular() {
			return "", invalid("--pepsi %s: not an executable file (make build makes bin/pepsi)", given)
		}
		return filepath.Abs(given)
	}
	beside := filepath.Join(filepath.Dir(self), "pepsi")
	if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return beside, nil
	}
	p, err := exec.LookPath("pepsi")
	if err != nil {
		return "", invalid("no pepsi executable beside %s or on PATH: give --pepsi PATH (make build makes bin/pepsi)", self)
	}
	return filepath.Abs(p)
}

// runStage is the stage program of the benchmark's pipelines, built on
// pkg/worker like any Go stage.
func runStage(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	var mode worker.Mode
	switch c.String("mode") {
	case "tx":
		mode = worker.InTransaction
	case "statusline":
		mode = worker.OnStatusLine
	default:
		return usage("--mode %q: want tx or statusline", c.String("mode"))
	}
	cfg, err := config.Resolve(c.String("config"), os.Getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // the dispatcher stamps what it relays
			}
			return a
		},
	}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	worker.OneProcessor() // as worker.Main does: a stage program is one slot
	return lab.Stage(ctx, lab.StageOptions{
		Mode: mode, Next: c.String("next"), DSN: cfg.DSN, Stage: os.Getenv("PEPSI_STAGE"),
		In: c.App.Reader, Out: c.App.Writer, Log: log, Trace: os.Getenv(lab.TraceEnv), Profile: os.Getenv(lab.ProfileEnv),
	})
}

// usageError is a mistake on the command line: exit 2, and a hint to run
// --help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usage(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// invalidError is a value that cannot work (a DSN that does not parse, no
// pepsi executable): exit 2, without the hint.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func invalid(format string, a ...any) error { return &invalidError{fmt.Sprintf(format, a...)} }

// onUsageError turns a flag parsing error into a usage error.
func onUsageError(_ *cli.Context, err error, _ bool) error { return usage("%v", err) }

// report writes err to w as one line, "pepsi-bench: message" (plus, for a
// usage error, a line naming --help), and returns the exit status.
func report(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var (
		ue *usageError
		ie *invalidError
		ce *config.Error
		ec cli.ExitCoder
	)
	code := 1
	switch {
	case errors.As(err, &ue), errors.As(err, &ie), errors.As(err, &ce):
		code = 2
	case errors.As(err, &ec):
		code = ec.ExitCode()
	}
	if err.Error() == "" {
		return code
	}
	fmt.Fprintln(w, name+": "+strings.Join(strings.Fields(err.Error()), " "))
	if ue != nil {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", name)
	}
	return code
}
