package main

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
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// The workload of `river bench --num-total-jobs N` (River's
// cmd/river/riverbench), written here against River as a library: the
// same job, worker and client configuration; N jobs inserted before the
// client starts; the time from the client's start to the last completion.

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
	elapsed    time.Duration // client start → last completion
	first      time.Duration // client start → first completion
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

	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     o.FetchCooldown,
		FetchPollInterval: o.FetchPollInterval,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.Workers}},
		Workers:           workers,
	})
	if err != nil {
		return res, err
	}

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

	// Completions are counted from the client's events, as river bench
	// counts them: an event comes after the completer has written the row.
	// The channel holds every event, so that none is dropped.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
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

	// The jobs are worked from a checkpoint, as pepsi bench starts its
	// batch: the WAL of the insert (or of the step before) does not bring
	// one on during the timed part.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return res, fmt.Errorf("checkpoint before the run: %w", err)
	}
	cpu0, _ := procCPU(os.Getpid())
	b0, bErr := backendCPU(ctx, pool)
	progress("River: client with %d workers on the default queue (FetchCooldown %v, FetchPollInterval %v), %d jobs",
		o.Workers, o.FetchCooldown, o.FetchPollInterval, n)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return res, fmt.Errorf("river start: %w", err)
	}
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
