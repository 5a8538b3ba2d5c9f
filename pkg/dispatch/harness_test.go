package dispatch

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// testWorker is the path of the built test stage program.
var testWorker string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pepsi-dispatch-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testWorker = filepath.Join(dir, "testworker")
	out, err := exec.Command("go", "build", "-o", testWorker, "github.com/pepsi-dev/pepsi/internal/testworker").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build testworker: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// bundle is a test's database, configuration and running dispatcher.
type bundle struct {
	t      testing.TB
	db     *pgtest.DB
	dsn    string
	cfg    *config.Config
	path   string
	logs   *syncBuffer
	logger *slog.Logger // nil: debug-level text into logs
	obs    Observer
	cancel context.CancelFunc
	done   chan error
}

// setup creates a migrated database and a pepsi.conf with the given
// [pepsi-dispatch] keys and stage sections; PROGRAM defaults to the test worker.
func setup(t testing.TB, dispatch string, stages ...string) *bundle {
	t.Helper()
	db, dsn := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE test_passes (id bigint, stage text, pid int, at timestamptz DEFAULT clock_timestamp());
		CREATE TABLE test_workers (pid int, stage text, args text, config text)`)
	if err != nil {
		t.Fatal(err)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "[database]\nDSN = %s\n\n[pepsi-dispatch]\n%s\n", dsn, dispatch)
	for _, s := range stages {
		name, keys, _ := strings.Cut(s, "\n")
		fmt.Fprintf(&conf, "\n[stage-%s]\n", name)
		if !strings.Contains(keys, "PROGRAM") {
			fmt.Fprintf(&conf, "PROGRAM = %s\n", testWorker)
		}
		conf.WriteString(keys + "\n")
	}
	path := filepath.Join(t.TempDir(), "pepsi.conf")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, db: db, dsn: dsn, cfg: cfg, path: path, logs: &syncBuffer{}}
}

// start runs the dispatcher in this process until stop.
func (b *bundle) start() {
	b.t.Helper()
	log := b.logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d, err := New(Options{Config: b.cfg, Log: log, Observe: b.obs})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan error, 1)
	go func() { b.done <- d.Run(ctx) }()
	b.t.Cleanup(func() {
		if b.cancel != nil {
			b.stop()
		}
	})
}

// stop cancels the dispatcher (as SIGTERM does) and waits for it to return.
func (b *bundle) stop() error {
	b.t.Helper()
	b.cancel()
	b.cancel = nil
	select {
	case err := <-b.done:
		return err
	case <-time.After(60 * time.Second):
		b.t.Fatalf("dispatcher did not stop; logs:\n%s", b.logs)
		return nil
	}
}

// enqueue inserts one message per payload at stage and returns the ids.
func (b *bundle) enqueue(stage string, payloads ...string) []int64 {
	b.t.Helper()
	ps := make([][]byte, len(payloads))
	for i, p := range payloads {
		ps[i] = []byte(p)
	}
	ids, err := b.db.EnqueueBulk(context.Background(), queue.Bulk{Stage: stage, Payloads: ps})
	if err != nil {
		b.t.Fatal(err)
	}
	return ids
}

// waitFor polls cond until it holds or the deadline passes.
func (b *bundle) waitFor(what string, timeout time.Duration, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s; logs:\n%s", what, b.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// int64 runs a query that returns one number.
func (b *bundle) int64(sql string, args ...any) int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// count is how many messages are in status.
func (b *bundle) count(status string) int64 {
	return b.int64("SELECT count(*) FROM pepsi.state WHERE status = $1", status)
}

// waitSettled waits until no message is pending, running or paused.
func (b *bundle) waitSettled(timeout time.Duration) {
	b.t.Helper()
	b.waitFor("every message done or failed", timeout, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.state WHERE status NOT IN ('done', 'failed')") == 0
	})
}

// row returns one message's status, stage and dispatch_error.
func (b *bundle) row(id int64) (status, stage, derr string) {
	b.t.Helper()
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT status, stage, coalesce(dispatch_error, '') FROM pepsi.state WHERE id = $1", id).Scan(&status, &stage, &derr)
	if err != nil {
		b.t.Fatal(err)
	}
	return
}

// checkInvariants stops the dispatcher if it runs, then checks that no
// message is running and that the statistics agree with the rows.
func (b *bundle) checkInvariants() {
	b.t.Helper()
	if b.cancel != nil {
		if err := b.stop(); err != nil {
			b.t.Errorf("dispatcher returned %v", err)
		}
	}
	if n := b.count("running"); n != 0 {
		b.t.Errorf("%d messages left running (first: %d); logs:\n%s", n,
			b.int64("SELECT min(id) FROM pepsi.state WHERE status = 'running'"), b.logs)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.message m LEFT JOIN pepsi.state s USING (id) WHERE s.id IS NULL"); n != 0 {
		b.t.Errorf("%d messages without a state row", n)
	}
	_, g, err := b.db.ReadStats(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	if done := b.count("done"); g.Done != done {
		b.t.Errorf("dispatch_stats.done = %d, rows done = %d", g.Done, done)
	}
	if failed := b.count("failed"); g.Failed != failed {
		b.t.Errorf("dispatch_stats.failed = %d, rows failed = %d", g.Failed, failed)
	}
	// Every claimed row was settled exactly once: as an answer, a failure,
	// or put back.
	if g.Claimed != g.Done+g.Failed+g.Paused+g.Requeued+g.Reset {
		b.t.Errorf("claimed %d != done %d + failed %d + paused %d + requeued %d + reset %d",
			g.Claimed, g.Done, g.Failed, g.Paused, g.Requeued, g.Reset)
	}
}
