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
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
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
	Conf        string // more lines of its section, as written in pepsi.conf ("RETRIES = 1\n")
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

// Buffer is a log sink safe for concurrent writers.
type Buffer = testkit.Buffer

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
	// Dispatch is more lines of [pepsi-dispatch] ("TRACING = on\n").
	Dispatch string
}

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options, stages ...Stage) *Pipeline {
	t.Helper()
	var conf strings.Builder
	conf.WriteString("[pepsi-dispatch]\nSHUTDOWN_GRACE = 5\nSPAWN_COOLDOWN = 1\n" + opts.Dispatch)
	for _, s := range stages {
		fmt.Fprintf(&conf, "\n[stage-%s]\nPROGRAM = %s\n", s.Name, s.Program)
		for _, kv := range []struct {
			key string
			v   int
		}{{"PARALLELISM", s.Parallelism}, {"QUEUE_LIMIT", s.QueueLimit}, {"MAX_MESSAGES", s.MaxMessages}} {
			if kv.v != 0 {
				fmt.Fprintf(&conf, "%s = %d\n", kv.key, kv.v)
			}
		}
		conf.WriteString(s.Conf)
	}
	var database []func(string) string
	if opts.WorkerDSN != nil {
		database = append(database, func(dsn string) string { return "WORKER_DSN = " + opts.WorkerDSN(dsn) + "\n" })
	}
	site := testkit.NewSite(t, conf.String(), database...)
	cfg, err := config.Load(site.Path)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{T: t, DB: site.DB, DSN: site.DSN, Path: site.Path, Config: cfg, Logs: site.Logs}
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

// site is the pipeline as a testkit.Site: a Pipeline made as a literal
// (without Start) has one too.
func (p *Pipeline) site() *testkit.Site {
	return &testkit.Site{T: p.T, DB: p.DB, DSN: p.DSN, Path: p.Path, Logs: p.Logs}
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
	return p.site().Int64(sql, args...)
}

// WaitFor polls cond until it holds, failing the test after timeout.
func (p *Pipeline) WaitFor(what string, timeout time.Duration, cond func() bool) {
	p.T.Helper()
	p.site().WaitFor(what, timeout, cond)
}

// WaitSettled waits until every message is done, failed or cancelled.
func (p *Pipeline) WaitSettled(timeout time.Duration) {
	p.T.Helper()
	p.site().WaitSettled(timeout)
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
	if !p.site().Check() {
		p.T.Logf("workertest: log:\n%s", p.Logs)
	}
}
