package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// The workload of `river bench --num-total-jobs N` (River's
// cmd/river/riverbench, river_bench.go, and its pool from
// cmd/river/rivercli's openPgxV5DBPool), written here against River as a
// library, point by point as River's CLI does it:
//
//   - the pool: pgxpool.ParseConfig of the DSN, pgxpool's defaults
//     (MaxConns max(4, CPUs)), application_name, statement_timeout 10 s and
//     idle_in_transaction_session_timeout 11 s unless the DSN sets them;
//   - the table: TRUNCATE river_job, VACUUM FULL river_job (resetJobsTable);
//   - the client: FetchCooldown 2 ms, FetchPollInterval 20 ms, the default
//     queue with MaxWorkers 2 000, everything else at River's defaults
//     (JobTimeout, CompletedJobRetentionPeriod, leader election, ...);
//   - the subscription, taken before the insert: completed, failed and
//     cancelled events, a channel of 75 000 (minJobs);
//   - the insert: N jobs {"num": i} (i from 1: River v0.51 numbers them,
//     PR #1379) by InsertMany in batches of 5 000, before the client
//     starts;
//   - beside the run, from the client's creation to its stop, a
//     JobCountByState(available) every second (river bench logs it);
//   - the clock: from just after client.Start returns to the last
//     completed event; jobs/s = N ÷ that.
//
// What is not River's CLI: the database is created and migrated here
// (river bench is given one that `river migrate-up` made), a CHECKPOINT
// before the insert (see runRiver), application_name, the logger's
// handler (river bench: tint on stdout at Warn; here slog text on stderr
// at Warn), and a retried failure is not counted as done (river bench
// counts every event; a no-op job does not fail).

// benchArgs is river bench's BenchmarkArgs.
type benchArgs struct {
	Num int `json:"num"`
}

func (benchArgs) Kind() string { return "benchmark" }

// benchWorker is river bench's BenchmarkWorker: it does nothing.
type benchWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (w *benchWorker) Work(ctx context.Context, j *river.Job[benchArgs]) error { return nil }

// riverOptions are the River client's settings; the defaults are river
// bench's.
type riverOptions struct {
	Workers           int           // MaxWorkers of the default queue (river bench: 2 000)
	FetchCooldown     time.Duration // river bench: 2 ms (River's default 100 ms)
	FetchPollInterval time.Duration // river bench: 20 ms (River's default 1 s)
	BatchSize         int           // jobs per insert (river bench: 5 000)
	InsertFast        bool          // InsertManyFast (COPY) instead of InsertMany (river bench)
	MaxConns          int           // the pool's MaxConns; 0: pgxpool's default, max(4, CPUs), as river bench
	Timeout           time.Duration // for the whole run
}

// riverResult is one River run.
type riverResult struct {
	jobs       int
	insertRate float64       // jobs/s inserted
	elapsed    time.Duration // client.Start returned → last completion
	first      time.Duration // client.Start returned → first completion (may be < 0)
	clientCPU  time.Duration // this process (the River client) during the work
	backendCPU time.Duration // the database's backends during the work; 0: unknown
	completed  int64         // rows in state completed afterwards
	load       float64
}

func (r riverResult) rate() float64 { return float64(r.jobs) / r.elapsed.Seconds() }

// riverDatabase creates database afresh on the server of serverDSN,
// migrates River's schema into it and opens a pool of maxConns; drop
// closes the pool and drops the database.
func riverDatabase(ctx context.Context, serverDSN, database string, maxConns int) (pool *pgxpool.Pool, drop func() error, err error) {
	if err := recreateDatabase(ctx, serverDSN, database); err != nil {
		return nil, nil, fmt.Errorf("create database %s: %w", database, err)
	}
	drop = func() error {
		if pool != nil {
			pool.Close()
		}
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if derr := dropDatabase(dctx, serverDSN, database); derr != nil {
			return fmt.Errorf("drop database %s: %w", database, derr)
		}
		return nil
	}
	dsn, err := withDatabase(serverDSN, database)
	if err == nil {
		pool, err = openPool(ctx, dsn, maxConns)
	}
	var migrator *rivermigrate.Migrator[pgx.Tx]
	if err == nil {
		migrator, err = rivermigrate.New(riverpgxv5.New(pool), nil)
	}
	if err == nil {
		if _, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			err = fmt.Errorf("river migrate: %w", err)
		}
	}
	if err != nil {
		_ = drop()
		return nil, nil, err
	}
	return pool, drop, nil
}

// riverBenchMinJobs is river bench's minJobs, the size of its
// subscription channel.
const riverBenchMinJobs = 75_000

// runRiver runs the workload once on a fresh database, which it drops at
// the end.
func runRiver(ctx context.Context, serverDSN, database string, n int, o riverOptions, progress func(string, ...any)) (res riverResult, err error) {
	res.jobs = n
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	pool, drop, err := riverDatabase(ctx, serverDSN, database, o.MaxConns)
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()
	driver := riverpgxv5.New(pool)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// river bench's resetJobsTable, on the driver's executor as there.
	for _, q := range []string{"TRUNCATE river_job", "VACUUM FULL river_job"} {
		if err := driver.GetExecutor().Exec(ctx, q); err != nil {
			return res, fmt.Errorf("river bench's reset, %s: %w", q, err)
		}
	}
	// Not river bench's: a CHECKPOINT before the insert, outside the timed
	// part. It settles the WAL of the step before (pepsi's, or River's
	// previous run), so that it does not bring a checkpoint on during the
	// timed part, and leaves the server as a `river bench` on a quiet server
	// finds it: the insert writes the pages' full-page images, and no
	// checkpoint falls between the insert and the worked jobs. Before
	// 2026-12-06 16:30 UTC it ran between the insert and client.Start, so
	// the first update of every page in the timed part wrote a full-page
	// image again, which river bench never pays.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return res, fmt.Errorf("checkpoint before the insert: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     o.FetchCooldown,
		FetchPollInterval: o.FetchPollInterval,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.Workers}},
		Workers:           workers,
	})
	if err != nil {
		return res, err
	}

	// Completions are counted from the client's events, as river bench
	// counts them (an event comes after the completer has written the
	// row), on a subscription taken before the insert as there. Its
	// channel is river bench's 75 000, or N when N is larger, so that no
	// event is dropped (a larger buffer costs memory only).
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: max(riverBenchMinJobs, n),
		Kinds:    []river.EventKind{river.EventKindJobCancelled, river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	defer unsubscribe()
	var (
		worked atomic.Int64
		first  atomic.Int64 // unix nanoseconds of the first completion
		last   atomic.Int64 // unix nanoseconds of the last completion
		failed atomic.Int64
		done   = make(chan struct{})
	)
	go func() {
		for ev := range events {
			if ev.Kind != river.EventKindJobCompleted {
				if ev.Kind == river.EventKindJobCancelled || ev.Job.State == rivertype.JobStateDiscarded {
					failed.Add(1)
				} else {
					continue // a failure that will be retried
				}
			}
			now := time.Now().UnixNano()
			first.CompareAndSwap(0, now)
			last.Store(now)
			if worked.Add(1) == int64(n) {
				close(done)
				return
			}
		}
	}()

	// river bench's second goroutine: the available jobs counted every
	// second, from before the insert until the client has stopped.
	countCtx, stopCount := context.WithCancel(ctx)
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-countCtx.Done():
				return
			case <-t.C:
				if _, err := driver.GetExecutor().JobCountByState(countCtx, &riverdriver.JobCountByStateParams{State: rivertype.JobStateAvailable}); err != nil && countCtx.Err() == nil {
					logger.Error("river: counting available jobs", "err", err)
				}
			}
		}
	}()
	defer func() { stopCount(); <-counted }()

	// N jobs, in batches, before the client starts (river bench
	// --num-total-jobs).
	progress("River: inserting %d jobs (%s, %d per batch)", n, insertName(o.InsertFast), o.BatchSize)
	t0 := time.Now()
	batch := make([]river.InsertManyParams, 0, o.BatchSize)
	for num := 1; num <= n; {
		batch = batch[:0]
		for ; num <= n && len(batch) < o.BatchSize; num++ {
			batch = append(batch, river.InsertManyParams{Args: benchArgs{Num: num}})
		}
		if o.InsertFast {
			_, err = client.InsertManyFast(ctx, batch)
		} else {
			_, err = client.InsertMany(ctx, batch)
		}
		if err != nil {
			return res, fmt.Errorf("river insert: %w", err)
		}
	}
	res.insertRate = float64(n) / time.Since(t0).Seconds()

	cpu0, _ := procCPU(os.Getpid())
	b0, bErr := backendCPU(ctx, pool)
	progress("River: client with %d workers on the default queue (FetchCooldown %v, FetchPollInterval %v), %d jobs",
		o.Workers, o.FetchCooldown, o.FetchPollInterval, n)
	if err := client.Start(ctx); err != nil {
		return res, fmt.Errorf("river start: %w", err)
	}
	// river bench's clock starts once Start has returned.
	start := time.Now()
	stopped := false
	defer func() {
		if !stopped {
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			_ = client.Stop(sctx)
		}
	}()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			return res, fmt.Errorf("river: %d of %d jobs done after %v: %w", worked.Load(), n, time.Since(start).Round(time.Second), ctx.Err())
		case <-tick.C:
			progress("River: %d of %d jobs done", worked.Load(), n)
		}
	}
	res.elapsed = time.Unix(0, last.Load()).Sub(start)
	res.first = time.Unix(0, first.Load()).Sub(start)
	res.load = loadAvg()
	if cpu1, err := procCPU(os.Getpid()); err == nil {
		res.clientCPU = cpu1 - cpu0
	}
	if b1, err := backendCPU(ctx, pool); err == nil && bErr == nil {
		res.backendCPU = cpuSince(b0, b1)
	}
	if f := failed.Load(); f > 0 {
		return res, fmt.Errorf("river: %d jobs failed or were cancelled", f)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	stopped = true
	if err := client.Stop(sctx); err != nil {
		return res, fmt.Errorf("river stop: %w", err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&res.completed); err != nil {
		return res, err
	}
	if res.completed != int64(n) {
		return res, fmt.Errorf("river: %d jobs completed in river_job, want %d", res.completed, n)
	}
	return res, nil
}

// openPool opens the pool as the river CLI does (its openPgxV5DBPool):
// pgxpool's defaults, with application_name, statement_timeout 10 s and
// idle_in_transaction_session_timeout 11 s unless the DSN sets them.
func openPool(ctx context.Context, dsn string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("DSN: %w", err)
	}
	params := cfg.ConnConfig.RuntimeParams
	for k, v := range map[string]string{
		"application_name":                    "pepsi bench peers (river)",
		"idle_in_transaction_session_timeout": strconv.Itoa(11_000),
		"statement_timeout":                   strconv.Itoa(10_000),
	} {
		if params[k] == "" {
			params[k] = v
		}
	}
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, errors.Join(errors.New("connect"), err)
	}
	return pool, nil
}

func insertName(fast bool) string {
	if fast {
		return "InsertManyFast"
	}
	return "InsertMany"
}
