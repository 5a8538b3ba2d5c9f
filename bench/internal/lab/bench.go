// Package lab is pepsi's benchmark harness (pepsi-bench, "make bench").
//
// On a database of its own (created on the server the DSN names, dropped
// afterwards) it measures what the performance issue asks for, each figure
// beside the database's own ceiling for the same work, measured in the same
// run on the same server:
//
//   - the commit ceiling: single-row UPDATE transactions per second that C
//     connections reach with nothing else running (C = the workers of the
//     pipeline compared with it), and the latency of one such transaction
//     on one connection (the floor of every latency);
//   - pepsi enqueue (COPY) in messages/s, against INSERT … SELECT of the
//     same rows inside the server;
//   - the claim with 1 000 000 pending rows against 1 000;
//   - a K-stage pipeline of stage programs built on pkg/worker, each pass
//     one UPDATE plus its transition in the worker's own transaction:
//     messages/s, stage passes/s (against the commit ceiling at the same
//     connection count), enqueue → done latency under load, the
//     dispatcher's CPU per pass and peak RSS;
//   - the same pipeline with no-op stages that answer their transition on
//     the status line (worker.OnStatusLine), against the rate at which the
//     dispatcher's own batched statements (pkg/queue RunTurn, no workers)
//     can move messages; and once more with 64 workers;
//   - wake latency on an idle system: enqueue commit → the id read from a
//     worker's stdin;
//   - a stage with RATE = 100/s on a full queue for 10 s: the dispatcher's
//     CPU as a share of a core, against under 5 %;
//   - only when asked for (OnlyNamed): a stage with RATE = 200/s on a full
//     queue, its messages handed out each second against the RATE, and the
//     dispatcher's CPU meanwhile; and KEY_LIMIT = 1 over 1 000 keys: the
//     status-line pipeline keyed against unkeyed, and the keyed claim with
//     1 000 000 pending rows against the plain one; and the sustained
//     pipeline: fed at its peak for minutes with RETENTION = 1 minute, its
//     throughput and pepsi's table sizes each minute, the claim's time at
//     the end against the start.
//
// The dispatcher runs as a child process ("pepsi dispatch" of the pepsi
// executable Options.Exe names), so that its CPU time (/proc/PID/stat) and
// peak RSS (VmHWM) are its own; the stage programs are "pepsi-bench stage"
// (Options.StageExe, see Stage).
//
// It is a client of the product like any other: pepsi's SQL API (the
// pepsi.* functions and tables), pepsi's commands (migrate, enqueue,
// dispatch) and the packages the product exports (pkg/queue, pkg/worker).
// The claim step times pkg/queue's Claim, the dispatcher's claim statement,
// in a transaction that it rolls back.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Options size and place a benchmark run. Zero values take the defaults
// (Defaults), which keep a run under a few minutes on a 2-core machine.
type Options struct {
	DSN      string // the server; the run creates (and drops) a database of its own on it
	Database string // that database's name; it is dropped first if it exists
	Keep     bool   // keep the database afterwards
	Exe      string // the pepsi executable measured: "pepsi dispatch" and "pepsi enqueue"
	StageExe string // the stage programs' executable, run as "StageExe stage --mode …" (pepsi-bench itself)
	Out      io.Writer
	Progress io.Writer // a line per step; nil for none

	Stages         int           // K
	Parallelism    int           // workers per stage (the commit and status-line pipelines)
	QueueLimit     int           // QUEUE_LIMIT of every stage
	CommitMessages int           // messages through the commit pipeline
	Messages       int           // messages through each status-line pipeline
	WideWorkers    int           // workers of the wide status-line run
	CeilingTime    time.Duration // how long each ceiling measurement runs
	WakeSamples    int           // single messages for the wake latency
	LoadTime       time.Duration // how long messages are fed for the latency under load
	LoadFraction   float64       // the feed rate, as a fraction of the pipeline's measured throughput
	EnqueueRuns    int           // pepsi enqueue runs (the median counts)
	EnqueueN       int           // messages per pepsi enqueue run
	ClaimRows      int           // pending rows of the large claim; 0 skips the claim figure
	IngressTime    time.Duration // how long each pgbench run of the ingress step lasts
	IngressRuns    int           // pgbench runs of each ingress transaction (the median counts)
	RateTime       time.Duration // how long the rate step runs its stage at its RATE (whole seconds)
	SustainedTime  time.Duration // how long the sustained step feeds its pipeline (whole minutes, at least 3)
	Only           []string      // run only these steps (Steps); nil: all but those OnlyNamed
}

// Steps are the benchmark's steps, in the order they run. The claim runs
// last: its VACUUM ANALYZE of a million pending rows would leave the
// planner statistics that say "everything is pending" to the pipelines
// (TRUNCATE keeps them).
var Steps = []string{"ceiling", "enqueue", "ingress", "commit", "statusline", "wide", "wake", "ratecpu", "graph", "tracing", "rate", "keys", "hotkeys", "sustained", "claim"}

// OnlyNamed are the steps that run only when Only names them: rate
// measures the accuracy of RATE, not pepsi's speed, for RateTime (30 s);
// keys what KEY costs (two pipelines, the hot keys and a million keyed
// rows), hotkeys the hot keys alone; sustained
// runs for SustainedTime (make bench runs it after the rest).
var OnlyNamed = []string{"rate", "keys", "hotkeys", "sustained"}

// Defaults are the sizes "make bench" runs with.
var Defaults = Options{
	Database:       "pepsi_bench",
	Stages:         3,
	Parallelism:    2,
	QueueLimit:     32,
	CommitMessages: 10_000,
	Messages:       60_000,
	WideWorkers:    64,
	CeilingTime:    5 * time.Second,
	WakeSamples:    300,
	LoadTime:       8 * time.Second,
	LoadFraction:   0.5,
	EnqueueRuns:    3,
	EnqueueN:       200_000,
	ClaimRows:      1_000_000,
	IngressTime:    10 * time.Second,
	IngressRuns:    1,
	RateTime:       30 * time.Second,
	SustainedTime:  4 * time.Minute,
}

func (o *Options) defaults() {
	d := Defaults
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	if o.Database == "" {
		o.Database = d.Database
	}
	set(&o.Stages, d.Stages)
	set(&o.Parallelism, d.Parallelism)
	set(&o.QueueLimit, d.QueueLimit)
	set(&o.CommitMessages, d.CommitMessages)
	set(&o.Messages, d.Messages)
	set(&o.WideWorkers, d.WideWorkers)
	set(&o.WakeSamples, d.WakeSamples)
	set(&o.EnqueueRuns, d.EnqueueRuns)
	set(&o.EnqueueN, d.EnqueueN)
	set(&o.IngressRuns, d.IngressRuns)
	if o.IngressTime == 0 {
		o.IngressTime = d.IngressTime
	}
	if o.CeilingTime == 0 {
		o.CeilingTime = d.CeilingTime
	}
	if o.LoadTime == 0 {
		o.LoadTime = d.LoadTime
	}
	if o.RateTime == 0 {
		o.RateTime = d.RateTime
	}
	if o.SustainedTime == 0 {
		o.SustainedTime = d.SustainedTime
	}
	if o.LoadFraction == 0 {
		o.LoadFraction = d.LoadFraction
	}
	if o.ClaimRows < 0 {
		o.ClaimRows = 0
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// bench is one run.
type bench struct {
	o       Options
	dsn     string        // the benchmark database
	db      *queue.DB     // what the product runs: pepsi's own statements
	sql     *pgxpool.Pool // the bench's own statements (db.go)
	dir     string        // configurations, logs, traces
	report  *Report
	stages  []string
	started time.Time

	ceilingC             float64       // commit ceiling at Stages × Parallelism connections, tx/s
	commitP50, commitP99 time.Duration // latency of one commit on one connection
}

// Run runs the benchmark and writes its report to o.Out.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if o.Exe == "" {
		return nil, errors.New("bench: no pepsi executable")
	}
	if o.StageExe == "" {
		return nil, errors.New("bench: no stage program (pepsi-bench's own executable)")
	}
	if o.Stages < 1 || o.Parallelism < 1 || o.QueueLimit < 1 {
		return nil, errors.New("bench: stages, parallelism and queue limit must be at least 1")
	}
	for _, name := range o.Only {
		if !slices.Contains(Steps, name) {
			return nil, fmt.Errorf("bench: no step %q (steps: %s)", name, strings.Join(Steps, ", "))
		}
	}
	b := &bench{o: o, started: time.Now()}
	for i := 1; i <= o.Stages; i++ {
		b.stages = append(b.stages, fmt.Sprintf("s%d", i))
	}
	dir, err := os.MkdirTemp("", "pepsi-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b.dir = dir
	if err := b.setup(ctx); err != nil {
		return nil, err
	}
	defer b.teardown()
	b.report = &Report{}
	if err := b.header(ctx); err != nil {
		return nil, err
	}
	steps := map[string]func(context.Context) error{
		"ceiling": b.ceilings, "enqueue": b.enqueue, "commit": b.commitPipeline, "statusline": b.statusLinePipeline,
		"wide": b.widePipeline, "wake": b.wake, "claim": b.claim, "ingress": b.ingress, "ratecpu": b.rateCPU, "rate": b.rate, "keys": b.keys, "hotkeys": b.hotKeys, "sustained": b.sustained,
		"graph": b.graph, "tracing": b.tracing,
	}
	for _, name := range Steps {
		if o.Only != nil && !slices.Contains(o.Only, name) || o.Only == nil && slices.Contains(OnlyNamed, name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return b.report, err
		}
		if err := steps[name](ctx); err != nil {
			return b.report, err
		}
	}
	b.report.Took = time.Since(b.started)
	b.report.Print(o.Out)
	return b.report, nil
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.o.Progress, "pepsi-bench: %s (load %.1f, %s)\n", fmt.Sprintf(format, args...), loadAvg(),
		time.Since(b.started).Round(time.Second))
}

// setup creates the database, migrates it and adds the bench schema.
func (b *bench) setup(ctx context.Context) error {
	if err := pgadmin.Recreate(ctx, b.o.DSN, b.o.Database); err != nil {
		return fmt.Errorf("create database %s: %w", b.o.Database, err)
	}
	b.dsn = pgadmin.WithDatabase(b.o.DSN, b.o.Database)
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := queue.Migrate(ctx, conn); err != nil {
		return err
	}
	if b.db, err = queue.Open(ctx, b.dsn, queue.Options{App: "pepsi bench", MaxConns: 4, NoJIT: true}); err != nil {
		return err
	}
	if b.sql, err = openSQL(ctx, b.dsn); err != nil {
		return err
	}
	return b.createSchema(ctx)
}

// teardown drops the database unless it is to be kept.
func (b *bench) teardown() {
	if b.db != nil {
		b.db.Close()
	}
	if b.sql != nil {
		b.sql.Close()
	}
	if b.o.Keep {
		fmt.Fprintf(b.o.Progress, "pepsi-bench: database %s kept\n", b.o.Database)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = pgadmin.Drop(ctx, b.o.DSN, b.o.Database)
}

// header records what the run ran on.
func (b *bench) header(ctx context.Context) error {
	st, err := b.settings(ctx)
	if err != nil {
		return err
	}
	r := b.report
	r.Header = append(r.Header,
		fmt.Sprintf("%d CPUs, load %.1f at the start; PostgreSQL %s (synchronous_commit %s, fsync %s, autovacuum %s, max_connections %d)",
			runtime.NumCPU(), loadAvg(), st.Version, st.SynchronousCommit, st.Fsync, st.Autovacuum, st.MaxConnections),
		fmt.Sprintf("database %s; %d stages; pipelines: %d workers (%d per stage), QUEUE_LIMIT %d, MAX_MESSAGES %d",
			b.o.Database, b.o.Stages, b.o.Stages*b.o.Parallelism, b.o.Parallelism, b.o.QueueLimit, maxMessages))
	return nil
}

// path is a file in the run's directory.
func (b *bench) path(name string) string { return filepath.Join(b.dir, name) }
