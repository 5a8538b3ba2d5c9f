package dispatch

// Helpers for the fault-injection tests (chaos_*_test.go): a three-stage
// pipeline, the faults themselves (worker kill -9, session termination, a
// server restart on a private cluster) and the checks made after them.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// chaosDispatch is the [pepsi-dispatch] section of the fault tests: quick
// reconnects, a short orphan sweep, a short spawn cooldown. MAX_RUNTIME is
// the test's to add.
const chaosDispatch = `POLL_INTERVAL = 2
STATS_INTERVAL = 60
WORKER_IDLE_TIMEOUT = 30
SHUTDOWN_GRACE = 5
RECONNECT_MIN = 0.1
RECONNECT_MAX = 1
ORPHAN_SWEEP = 2
SPAWN_COOLDOWN = 0.2`

// chaosWith is chaosDispatch with keys set or replaced ("RECONNECT_MIN = 1").
func chaosWith(settings ...string) string {
	lines := strings.Split(chaosDispatch, "\n")
	for _, kv := range settings {
		key, _, _ := strings.Cut(kv, "=")
		key = strings.TrimSpace(key)
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, key+" ") })
		if i < 0 {
			lines = append(lines, kv)
		} else {
			lines[i] = kv
		}
	}
	return strings.Join(lines, "\n")
}

// chaosRetries retries a failed pass quickly.
const chaosRetries = "RETRIES = 3\nRETRY_DELAY = 0.1\nRETRY_DELAY_MAX = 0.5"

// chaosStages returns the three stages parse → enrich → deliver, each
// with two workers of four messages and the extra keys given for it.
func chaosStages(parse, enrich, deliver string) []string {
	return []string{
		"parse\nPARALLELISM = 2\nQUEUE_LIMIT = 4\n" + parse,
		"enrich\nPARALLELISM = 2\nQUEUE_LIMIT = 4\n" + enrich,
		"deliver\nPARALLELISM = 2\nQUEUE_LIMIT = 4\n" + deliver,
	}
}

// through is the payload of a message that goes through the three stages,
// each sleeping for sleep; actions replaces a stage's action ("enrich=hang").
func through(sleep string, actions ...string) string {
	act := map[string]string{"parse": "advance:enrich", "enrich": "advance:deliver", "deliver": "finish"}
	for _, a := range actions {
		k, v, _ := strings.Cut(a, "=")
		act[k] = v
	}
	return fmt.Sprintf("@sleep=%s parse=%s enrich=%s deliver=%s", sleep, act["parse"], act["enrich"], act["deliver"])
}

// faults records what was injected and which messages were in flight
// (claimed: running) at any fault.
type faults struct {
	b        *bundle
	inflight map[int64]bool
	kinds    map[string]int
	marked   int64 // the server's clock at the last mark, in µs since the epoch
}

// newFaults starts the record of b's faults; the dispatcher's log is shown
// when the test fails.
func newFaults(b *bundle) *faults {
	b.t.Cleanup(func() {
		if (b.t.Failed() && !b.logsShown) || os.Getenv("CHAOS_LOGS") != "" {
			b.t.Logf("dispatcher log:\n%s", b.logs)
		}
	})
	return &faults{b: b, inflight: make(map[int64]bool), kinds: make(map[string]int)}
}

// mark records a fault of kind and the messages running now.
func (f *faults) mark(kind string) {
	f.b.t.Helper()
	f.kinds[kind]++
	f.b.t.Logf("%s: %s", time.Now().Format("15:04:05.000"), kind)
	f.marked = f.b.int64("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
	for _, id := range f.b.ids("SELECT id FROM pepsi.state WHERE status = 'running'") {
		f.inflight[id] = true
	}
}

// after adds the messages running just after a fault, or changed since
// its mark, to those in flight at it: one handed to a worker between
// mark's read and the fault (a claim lands in between) is as much at the
// fault's mercy, and the fault's own settle (a killed worker's messages
// failed or retried) may land before this read.
func (f *faults) after() {
	f.b.t.Helper()
	for _, id := range f.b.ids("SELECT id FROM pepsi.state WHERE status = 'running' OR updated_at >= to_timestamp($1 / 1e6)", f.marked) {
		f.inflight[id] = true
	}
}

// log says what was injected.
func (f *faults) log() {
	var parts []string
	for k, n := range f.kinds {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n))
	}
	slices.Sort(parts)
	f.b.t.Logf("faults: %s; %d messages in flight at a fault", strings.Join(parts, ", "), len(f.inflight))
}

// checkDuplicates checks the stage passes recorded by the test worker:
// with none false, a message may have passed a stage twice only if it was
// in flight at a fault; with none true, no message may have.
func (f *faults) checkDuplicates(none bool) {
	f.b.t.Helper()
	mayRepeat := f.inflight
	if none {
		mayRepeat = nil
	}
	testkit.CheckPassedOnce(f.b.t, f.b.db, mayRepeat)
}

// ids runs a query that returns message ids.
func (b *bundle) ids(sql string, args ...any) []int64 {
	b.t.Helper()
	return b.site.IDs(sql, args...)
}

// try64 is int64 that returns the error instead of failing: for polling
// while the server may be down.
func (b *bundle) try64(sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int64
	err := b.db.Pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// waitCount waits until sql returns at least n, tolerating errors (the
// server may be restarting).
func (b *bundle) waitCount(what string, timeout time.Duration, n int64, sql string, args ...any) {
	b.t.Helper()
	b.waitFor(what, timeout, func() bool {
		got, err := b.try64(sql, args...)
		return err == nil && got >= n
	})
}

// waitLog waits until the dispatcher's log holds at least n lines with s.
func (b *bundle) waitLog(s string, n int, timeout time.Duration) {
	b.t.Helper()
	b.waitFor(fmt.Sprintf("%d× %q in the log", n, s), timeout, func() bool {
		return strings.Count(b.logs.String(), s) >= n
	})
}

// waitSettledTolerant is waitSettled through a server that may be restarting.
func (b *bundle) waitSettledTolerant(timeout time.Duration) {
	b.t.Helper()
	b.waitFor("every message done or failed", timeout, func() bool {
		n, err := b.try64(testkit.UnsettledSQL)
		return err == nil && n == 0
	})
}

// checkExplained checks, while the dispatcher may still run, that no
// message is lost: each has a state row and is done or failed, and every
// failure says why.
func (b *bundle) checkExplained() {
	b.t.Helper()
	b.site.Check(testkit.Settled, testkit.RowsOnly)
}

// failures returns the failed messages and their reasons.
func (b *bundle) failures() map[int64]string {
	b.t.Helper()
	rows, err := b.db.Pool.Query(context.Background(),
		"SELECT id, coalesce(dispatch_error, '') || coalesce(error, '') FROM pepsi.state WHERE status = 'failed'")
	if err != nil {
		b.t.Fatal(err)
	}
	out := make(map[int64]string)
	var id int64
	var reason string
	_, err = pgx.ForEachRow(rows, []any{&id, &reason}, func() error {
		out[id] = reason
		return nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

// liveWorkers returns the pids of the test workers that are running now.
func (b *bundle) liveWorkers(stage string) []int {
	b.t.Helper()
	var pids []int
	for _, pid := range b.ids("SELECT pid FROM test_workers WHERE $1 = '' OR stage = $1 ORDER BY pid", stage) {
		if isTestWorker(int(pid)) {
			pids = append(pids, int(pid))
		}
	}
	return pids
}

// isTestWorker reports whether pid is a running test worker (not a zombie,
// not a reused pid).
func isTestWorker(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), testkit.WorkerName) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return false
}

// killWorker kills a random running worker of stage ("" for any) with
// SIGKILL and returns its pid, or 0 when none runs.
func (b *bundle) killWorker(stage string) int {
	b.t.Helper()
	pids := b.liveWorkers(stage)
	if len(pids) == 0 {
		return 0
	}
	pid := pids[rand.N(len(pids))]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		b.t.Fatal(err)
	}
	return pid
}

// sessions are the server sessions of the test database.
type sessions struct {
	listeners []int32 // the dispatchers' listener sessions (application_name 'pepsi dispatch pid …')
	lock      int32   // the session that holds the dispatcher lock (0: none)
	pool      []int32 // the dispatchers' pool connections
	workers   []int32 // the test workers' sessions
}

// sessions lists the server sessions in the test database that are not the
// test's own (pgtest names those).
func (b *bundle) sessions() sessions {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := b.db.Pool.Query(ctx, `
SELECT a.pid, a.application_name,
       EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock')
  FROM pg_stat_activity a
 WHERE a.datname = current_database() AND a.backend_type = 'client backend' AND a.application_name NOT LIKE $1`, pgtest.App+" %")
	if err != nil {
		b.t.Fatal(err)
	}
	var s sessions
	var pid int32
	var app string
	var locked bool
	_, err = pgx.ForEachRow(rows, []any{&pid, &app, &locked}, func() error {
		switch {
		case strings.HasPrefix(app, "pepsi dispatch pid "):
			s.listeners = append(s.listeners, pid)
			if locked {
				s.lock = pid
			}
		case strings.HasPrefix(app, "testworker "):
			s.workers = append(s.workers, pid)
		default:
			s.pool = append(s.pool, pid)
		}
		return nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// terminate ends server sessions with pg_terminate_backend.
func (b *bundle) terminate(pids []int32) {
	b.t.Helper()
	if len(pids) == 0 {
		return
	}
	if _, err := b.db.Pool.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", pids); err != nil {
		b.t.Fatal(err)
	}
}

// cluster is a private PostgreSQL server (scripts/pg-local with
// PEPSI_PG_DIR) that a test may stop and start.
type cluster struct {
	t    *testing.T
	dir  string
	port string
	dsn  string // of its postgres database
}

// newCluster creates and starts a private cluster, removed when t ends.
// A test that needs one fails, loudly, when it cannot be had.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	// The cluster's owner (postgres, when the tests run as root) must reach
	// the directory: not under t.TempDir(), which is private.
	base, err := os.MkdirTemp("", "pepsi-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: filepath.Join(base, "pg"), port: strconv.Itoa(54400 + rand.N(500))}
	t.Cleanup(func() {
		if out, err := c.run("stop", "--clean"); err != nil {
			t.Errorf("pg-local stop --clean: %v\n%s", err, out)
		}
		os.RemoveAll(base)
	})
	out, err := c.run("start")
	if err != nil {
		t.Fatalf("a private cluster is needed for this test: scripts/pg-local start: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	c.dsn = lines[len(lines)-1]
	if !strings.HasPrefix(c.dsn, "postgres://") {
		t.Fatalf("scripts/pg-local start printed no DSN:\n%s", out)
	}
	return c
}

// run runs scripts/pg-local on the cluster and returns its stdout (and
// stderr, on failure).
func (c *cluster) run(args ...string) (string, error) {
	script, err := filepath.Abs("../../scripts/pg-local")
	if err != nil {
		return "", err
	}
	start := time.Now()
	defer func() {
		c.t.Logf("pg-local %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	}()
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "PEPSI_PG_DIR="+c.dir, "PEPSI_PG_PORT="+c.port)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// stop stops the server (pg_ctl stop -m fast: every session is ended).
func (c *cluster) stop() {
	c.t.Helper()
	if out, err := c.run("stop"); err != nil {
		c.t.Fatalf("pg-local stop: %v\n%s", err, out)
	}
}

// durable makes the server keep every commit it acknowledged through a
// crash, as a production server does (the private cluster runs with
// synchronous_commit off).
func (c *cluster) durable() {
	c.t.Helper()
	if out, err := exec.Command("psql", "-X", "-q", "-d", c.dsn, "-c", "ALTER SYSTEM SET synchronous_commit = on", "-c", "SELECT pg_reload_conf()").CombinedOutput(); err != nil {
		c.t.Fatalf("synchronous_commit on: %v\n%s", err, out)
	}
}

// crashServer crashes c's server under b's dispatcher (an immediate stop)
// and starts it again, waiting until the dispatcher has seen it go and
// come back.
func (b *bundle) crashServer(c *cluster) {
	b.t.Helper()
	reconnects := strings.Count(b.logs.String(), "listener reconnected")
	c.stopImmediate()
	b.waitLog("listener: reconnect failed", 1, time.Minute)
	c.start()
	b.waitLog("listener reconnected", reconnects+1, time.Minute)
}

// stopImmediate stops the server as a crash would (pg_ctl stop -m
// immediate: no checkpoint, crash recovery at the next start).
func (c *cluster) stopImmediate() {
	c.t.Helper()
	if out, err := c.run("stop", "--immediate"); err != nil {
		c.t.Fatalf("pg-local stop --immediate: %v\n%s", err, out)
	}
}

// start starts it again.
func (c *cluster) start() {
	c.t.Helper()
	if out, err := c.run("start"); err != nil {
		c.t.Fatalf("pg-local start: %v\n%s", err, out)
	}
}
