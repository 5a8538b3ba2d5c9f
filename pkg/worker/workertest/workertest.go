// Package workertest runs stage programs under a real pepsi dispatcher,
// in-process, on a fresh database, for tests: the stage programs are real
// child processes speaking the worker protocol, the database is a real
// PostgreSQL (pgtest: PEPSI_TEST_DSN names the server).
//
//	p := workertest.Start(t, workertest.Stage{Name: "parse", Program: bin + " --next deliver"},
//		workertest.Stage{Name: "deliver", Program: bin})
//	p.Enqueue("parse", []byte("hello"))
//	p.WaitSettled(time.Minute)
//	p.Check() // stops the dispatcher and checks the queue's invariants
package workertest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/dispatch"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Stage is one [stage-NAME] section; zero limits take pepsi's defaults.
type Stage struct {
	Name        string
	Program     string // PROGRAM as written in pepsi.conf
	Parallelism int
	QueueLimit  int
	MaxMessages int
}

// Pipeline is a database, its pepsi.conf and a dispatcher running on them.
type Pipeline struct {
	T      testing.TB
	DB     *pgtest.DB // the database's pools: the product's, and Pool for the test's own SQL
	DSN    string
	Path   string // the pepsi.conf written for the test
	Config *config.Config
	Logs   *Buffer // the dispatcher's log, stage programs' stderr included

	cancel context.CancelFunc
	done   chan error
}

// Start creates a migrated database, writes a pepsi.conf with the stages
// (and settings that keep a test short: a 5 s SHUTDOWN_GRACE, a 1 s
// SPAWN_COOLDOWN) and starts a dispatcher on it, stopped when t ends.
func Start(t testing.TB, stages ...Stage) *Pipeline {
	t.Helper()
	return StartWith(t, Options{}, stages...)
}

// Options are what StartWith adds to the pepsi.conf that Start writes.
type Options struct {
	// WorkerDSN, when set, makes [database] WORKER_DSN from the test
	// database's DSN: the stage programs connect with it (a pooler in
	// front of the database, say), the dispatcher with the DSN.
	WorkerDSN func(dsn string) string
}

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options, stages ...Stage) *Pipeline {
	t.Helper()
	db, dsn := pgtest.New(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "[database]\nDSN = %s\n", dsn)
	if opts.WorkerDSN != nil {
		fmt.Fprintf(&conf, "WORKER_DSN = %s\n", opts.WorkerDSN(dsn))
	}
	conf.WriteString("\n[pepsi-dispatch]\nSHUTDOWN_GRACE = 5\nSPAWN_COOLDOWN = 1\n")
	for _, s := range stages {
		fmt.Fprintf(&conf, "\n[stage-%s]\nPROGRAM = %s\n", s.Name, s.Program)
		for key, v := range map[string]int{"PARALLELISM": s.Parallelism, "QUEUE_LIMIT": s.QueueLimit, "MAX_MESSAGES": s.MaxMessages} {
			if v != 0 {
				fmt.Fprintf(&conf, "%s = %d\n", key, v)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "pepsi.conf")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{T: t, DB: db, DSN: dsn, Path: path, Config: cfg, Logs: &Buffer{}}
	log := slog.New(slog.NewTextHandler(p.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := dispatch.New(dispatch.Options{Config: cfg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		if p.cancel != nil {
			_ = p.Stop()
		}
	})
	return p
}

// Stop stops the dispatcher as SIGTERM does and returns what Run returned.
func (p *Pipeline) Stop() error {
	p.T.Helper()
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	p.cancel = nil
	select {
	case err := <-p.done:
		return err
	case <-time.After(time.Minute):
		p.T.Fatalf("workertest: dispatcher did not stop; log:\n%s", p.Logs)
		return nil
	}
}

// Enqueue puts messages with these payloads into stage and returns their ids.
func (p *Pipeline) Enqueue(stage string, payloads ...[]byte) []int64 {
	p.T.Helper()
	ids := make([]int64, len(payloads))
	for i, pl := range payloads {
		id, err := queue.Enqueue(context.Background(), p.DB.Pool, stage, pl, nil)
		if err != nil {
			p.T.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// Int64 runs a query that returns one number.
func (p *Pipeline) Int64(sql string, args ...any) int64 {
	p.T.Helper()
	var n int64
	if err := p.DB.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		p.T.Fatalf("%s: %v", sql, err)
	}
	return n
}

// WaitFor polls cond until it holds, failing the test after timeout.
func (p *Pipeline) WaitFor(what string, timeout time.Duration, cond func() bool) {
	p.T.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			p.T.Fatalf("workertest: timed out after %v waiting for %s; log:\n%s", timeout, what, p.Logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitSettled waits until every message is done or failed.
func (p *Pipeline) WaitSettled(timeout time.Duration) {
	p.T.Helper()
	p.WaitFor("every message done or failed", timeout, func() bool {
		return p.Int64("SELECT count(*) FROM pepsi.state WHERE status NOT IN ('done', 'failed')") == 0
	})
}

// Row is a message's queue row and headers.
type Row struct {
	Status, Stage, Error, DispatchError string
	Attempts                            int
	Headers                             map[string]any
}

// Row reads message id.
func (p *Pipeline) Row(id int64) Row {
	p.T.Helper()
	var r Row
	err := p.DB.Pool.QueryRow(context.Background(), `
		SELECT s.status, s.stage, coalesce(s.error, ''), coalesce(s.dispatch_error, ''), s.attempts, m.headers
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id = $1`, id).
		Scan(&r.Status, &r.Stage, &r.Error, &r.DispatchError, &r.Attempts, &r.Headers)
	if err != nil {
		p.T.Fatalf("workertest: message %d: %v", id, err)
	}
	return r
}

// Check stops the dispatcher and checks the invariants every run must
// keep: it returned nil, no message is left running, every message has a
// queue row, and the statistics agree with the rows.
func (p *Pipeline) Check() {
	p.T.Helper()
	if err := p.Stop(); err != nil {
		p.T.Errorf("workertest: dispatcher returned %v; log:\n%s", err, p.Logs)
	}
	if n := p.Int64("SELECT count(*) FROM pepsi.state WHERE status = 'running'"); n != 0 {
		p.T.Errorf("workertest: %d messages left running; log:\n%s", n, p.Logs)
	}
	if n := p.Int64("SELECT count(*) FROM pepsi.message m LEFT JOIN pepsi.state s ON s.id = m.id WHERE s.id IS NULL"); n != 0 {
		p.T.Errorf("workertest: %d messages without a queue row", n)
	}
	_, g, err := p.DB.ReadStats(context.Background())
	if err != nil {
		p.T.Fatal(err)
	}
	done := p.Int64("SELECT count(*) FROM pepsi.state WHERE status = 'done'")
	failed := p.Int64("SELECT count(*) FROM pepsi.state WHERE status = 'failed'")
	if g.Done != done || g.Failed != failed {
		p.T.Errorf("workertest: dispatch_stats done %d failed %d, rows done %d failed %d", g.Done, g.Failed, done, failed)
	}
	if g.Claimed != g.Done+g.Failed+g.Paused+g.Requeued+g.Reset {
		p.T.Errorf("workertest: claimed %d != done %d + failed %d + paused %d + requeued %d + reset %d",
			g.Claimed, g.Done, g.Failed, g.Paused, g.Requeued, g.Reset)
	}
}

// Buffer is a log sink safe for concurrent writers.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
