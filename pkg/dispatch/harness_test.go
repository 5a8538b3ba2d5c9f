package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// bundle is a test's site (database, pepsi.conf and log) and the
// dispatcher running on it in this process; t, db, dsn and logs are the
// site's, under the names the tests use.
type bundle struct {
	site   *testkit.Site
	t      testing.TB
	db     *pgtest.DB
	dsn    string
	cfg    *config.Config
	logs   *testkit.Buffer
	logger *slog.Logger // nil: debug-level text into logs
	obs    Observer
	cancel context.CancelFunc
	done   chan error

	logsShown bool // a check has shown the log: the fault tests need not again
}

// setup creates a migrated database with the test worker's tables and a
// pepsi.conf with the given [pepsi-dispatch] keys and stage sections
// ("NAME\nKEY = VALUE..."); PROGRAM defaults to the test worker.
func setup(t testing.TB, dispatch string, stages ...string) *bundle {
	t.Helper()
	worker := testkit.Worker(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "[pepsi-dispatch]\n%s\n", dispatch)
	for _, s := range stages {
		name, keys, _ := strings.Cut(s, "\n")
		fmt.Fprintf(&conf, "\n[stage-%s]\n", name)
		if !strings.Contains(keys, "PROGRAM") {
			fmt.Fprintf(&conf, "PROGRAM = %s\n", worker)
		}
		conf.WriteString(keys + "\n")
	}
	site := testkit.NewSite(t, conf.String())
	site.WorkerTables()
	cfg, err := config.Load(site.Path)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{site: site, t: t, db: site.DB, dsn: site.DSN, cfg: cfg, logs: site.Logs}
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
	return b.site.Enqueue(stage, ps...)
}

// waitFor polls cond until it holds, failing the test with the log after
// timeout.
func (b *bundle) waitFor(what string, timeout time.Duration, cond func() bool) {
	b.t.Helper()
	b.site.WaitFor(what, timeout, cond)
}

// int64 runs a query that returns one number.
func (b *bundle) int64(sql string, args ...any) int64 {
	b.t.Helper()
	return b.site.Int64(sql, args...)
}

// count is how many messages are in status.
func (b *bundle) count(status string) int64 {
	b.t.Helper()
	return b.site.Count(status)
}

// waitSettled waits until no message is pending, running or paused.
func (b *bundle) waitSettled(timeout time.Duration) {
	b.t.Helper()
	b.site.WaitSettled(timeout)
}

// row returns one message's status, stage and dispatch_error.
func (b *bundle) row(id int64) (status, stage, derr string) {
	b.t.Helper()
	err := b.db.Pool.QueryRow(context.Background(),
		"SELECT status, stage, coalesce(dispatch_error, '') FROM pepsi.state WHERE id = $1", id).Scan(&status, &stage, &derr)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", "" // enqueued by pepsi.enqueue(), not admitted yet
	}
	if err != nil {
		b.t.Fatal(err)
	}
	return
}

// checkInvariants stops the dispatcher if it runs, then checks the
// invariants every run must keep (testkit.CheckInvariants): no message
// running, every message with a state row, and the statistics equal to the
// rows.
func (b *bundle) checkInvariants() {
	b.t.Helper()
	if b.cancel != nil {
		if err := b.stop(); err != nil {
			b.t.Errorf("dispatcher returned %v", err)
		}
	}
	if !b.site.Check() {
		b.showLogs()
	}
}

// showLogs shows the dispatcher's log, once.
func (b *bundle) showLogs() {
	b.t.Helper()
	if !b.logsShown {
		b.logsShown = true
		b.t.Logf("logs:\n%s", b.logs)
	}
}
