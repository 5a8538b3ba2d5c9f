package app

// Faults that only the real binary can take: kill -9 of the dispatcher and
// a restart, SIGTERM and a restart, a --standby that takes over from a
// killed dispatcher, a database that is not there at start; and payloads of
// 0 bytes and 100 MiB through a whole pipeline. The stage program is the
// dispatcher tests' test worker, which records each committed stage pass in
// test_passes so that passes made twice can be counted.

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

var (
	workerOnce sync.Once
	workerPath string
	workerErr  error
)

// testWorker builds the dispatcher tests' stage program next to the binary.
func testWorker(t *testing.T) string {
	t.Helper()
	bin := binary(t)
	workerOnce.Do(func() {
		workerPath = filepath.Join(filepath.Dir(bin), "testworker")
		out, err := exec.Command("go", "build", "-o", workerPath, "github.com/pepsi-dev/pepsi/internal/testworker").CombinedOutput()
		if err != nil {
			workerErr = &buildError{err, out}
		}
	})
	if workerErr != nil {
		t.Fatalf("build the test worker: %v", workerErr)
	}
	return workerPath
}

// faultDB is a migrated database with the test worker's tables, and a
// pepsi.conf (through PEPSI_CONFIG and PEPSI_DSN) of three stages
// parse → enrich → deliver run by the test worker, with extra keys in
// [pepsi-dispatch].
type faultDB struct {
	t    *testing.T
	db   *pgtest.DB
	dsn  string
	conf string
}

func newFaultDB(t *testing.T, dispatch string) *faultDB {
	t.Helper()
	worker := testWorker(t)
	db, dsn := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `
		CREATE TABLE test_passes (id bigint, stage text, pid int, at timestamptz DEFAULT clock_timestamp());
		CREATE TABLE test_workers (pid int, stage text, args text, config text)`)
	if err != nil {
		t.Fatal(err)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "[pepsi-dispatch]\nPOLL_INTERVAL = 2\nSTATS_INTERVAL = 1\nSHUTDOWN_GRACE = 5\n"+
		"RECONNECT_MIN = 0.1\nRECONNECT_MAX = 1\nORPHAN_SWEEP = 2\n%s\n", dispatch)
	for _, s := range []string{"parse", "enrich", "deliver"} {
		fmt.Fprintf(&conf, "\n[stage-%s]\nPROGRAM = %s\nPARALLELISM = 2\nQUEUE_LIMIT = 4\n", s, worker)
	}
	return &faultDB{t: t, db: db, dsn: dsn, conf: env(t, dsn, conf.String())}
}

// pipeline is a payload that goes through the three stages, each sleeping
// for sleep first.
func pipeline(sleep string) string {
	return "@sleep=" + sleep + " parse=advance:enrich enrich=advance:deliver deliver=finish"
}

// enqueue puts n messages with payload at parse.
func (f *faultDB) enqueue(n int, payload string) {
	f.t.Helper()
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(payload)
	}
	if _, err := f.db.EnqueueBulk(context.Background(), queue.Bulk{Stage: "parse", Payloads: ps}); err != nil {
		f.t.Fatal(err)
	}
}

// int64 runs a query that returns one number.
func (f *faultDB) int64(sql string, args ...any) int64 {
	f.t.Helper()
	var n int64
	if err := f.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (f *faultDB) count(status string) int64 {
	return f.int64("SELECT count(*) FROM pepsi.state WHERE status = $1", status)
}

// running returns the ids of the running messages.
func (f *faultDB) running() map[int64]bool {
	f.t.Helper()
	rows, err := f.db.Pool.Query(context.Background(), "SELECT id FROM pepsi.state WHERE status = 'running'")
	if err != nil {
		f.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		f.t.Fatal(err)
	}
	m := make(map[int64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// stats reads dispatch_stats.
func (f *faultDB) stats() queue.DispatchStats {
	f.t.Helper()
	_, g, err := f.db.ReadStats(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return g
}

// waitSettled waits until every message is done or failed.
func (f *faultDB) waitSettled(logs ...*lockedBuffer) {
	f.t.Helper()
	waitLong(f.t, "every message done or failed", 3*time.Minute, func() bool {
		return f.int64("SELECT count(*) FROM pepsi.state WHERE status NOT IN ('done', 'failed')") == 0
	}, logs...)
}

// checkEnd checks what must hold once every dispatcher has stopped: no
// message lost or running, every failure explained, and no stage passed
// twice except by a message in inflight (nil: none may be).
func (f *faultDB) checkEnd(inflight map[int64]bool) {
	f.t.Helper()
	if n := f.int64("SELECT count(*) FROM pepsi.state WHERE status NOT IN ('done', 'failed')"); n != 0 {
		f.t.Errorf("%d messages neither done nor failed", n)
	}
	if n := f.int64("SELECT count(*) FROM pepsi.message m LEFT JOIN pepsi.state s USING (id) WHERE s.id IS NULL"); n != 0 {
		f.t.Errorf("%d messages without a state row", n)
	}
	if n := f.int64(`SELECT count(*) FROM pepsi.state WHERE status = 'failed'
		AND coalesce(dispatch_error, '') = '' AND coalesce(error, '') = ''`); n != 0 {
		f.t.Errorf("%d failed messages without a reason", n)
	}
	rows, err := f.db.Pool.Query(context.Background(),
		"SELECT id FROM test_passes GROUP BY id, stage HAVING count(*) > 1")
	if err != nil {
		f.t.Fatal(err)
	}
	dups, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		f.t.Fatal(err)
	}
	var bad []int64
	for _, id := range dups {
		if !inflight[id] {
			bad = append(bad, id)
		}
	}
	f.t.Logf("%d stage passes made twice; %d messages were in flight at the fault", len(dups), len(inflight))
	if len(bad) > 0 {
		f.t.Errorf("stage passes made twice by messages not in flight at the fault: %v", bad[:min(len(bad), 20)])
	}
}

// checkStats checks that the statistics written since before equal the
// rows that changed since then: done and failed as counted by the rows, and
// every claim settled once.
func (f *faultDB) checkStats(before, after queue.DispatchStats, doneRows, failedRows int64) {
	f.t.Helper()
	d := delta(before, after)
	if d.Done != doneRows || d.Failed != failedRows {
		f.t.Errorf("dispatch_stats counted done %d failed %d, the rows %d and %d", d.Done, d.Failed, doneRows, failedRows)
	}
	if d.Claimed != d.Done+d.Failed+d.Paused+d.Requeued+d.Reset {
		f.t.Errorf("claimed %d != done %d + failed %d + paused %d + requeued %d + reset %d",
			d.Claimed, d.Done, d.Failed, d.Paused, d.Requeued, d.Reset)
	}
}

func delta(a, b queue.DispatchStats) queue.DispatchStats {
	return queue.DispatchStats{
		Claimed: b.Claimed - a.Claimed, StagePasses: b.StagePasses - a.StagePasses, Requeued: b.Requeued - a.Requeued,
		Done: b.Done - a.Done, Failed: b.Failed - a.Failed, Paused: b.Paused - a.Paused, Resumed: b.Resumed - a.Resumed,
		Reset: b.Reset - a.Reset, Orphans: b.Orphans - a.Orphans,
	}
}

// daemon is a running `pepsi dispatch`.
type daemon struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
	err    error
}

// startDispatch starts the binary with args after "dispatch"; it is
// killed when the test ends, and its log shown if the test failed.
func startDispatch(t *testing.T, name string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"dispatch"}, args...)...)
	d := &daemon{t: t, name: name, cmd: cmd, logs: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = d.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.err = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.exited
		if t.Failed() || os.Getenv("CHAOS_LOGS") != "" {
			t.Logf("%s log:\n%s", name, d.logs)
		}
	})
	return d
}

// waitLog waits until the log has n lines containing s.
func (d *daemon) waitLog(s string, n int) {
	d.t.Helper()
	waitLong(d.t, fmt.Sprintf("%s to log %q", d.name, s), time.Minute, func() bool {
		if strings.Count(d.logs.String(), s) >= n {
			return true
		}
		select {
		case <-d.exited:
			d.t.Fatalf("%s exited (%v) before it logged %q; log:\n%s", d.name, d.err, s, d.logs)
		default:
		}
		return false
	}, d.logs)
}

// signal sends sig and, unless it is SIGSTOP, waits for the exit and
// returns the exit status (-1: killed by a signal).
func (d *daemon) signal(sig syscall.Signal) int {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
	if sig == syscall.SIGSTOP {
		return 0
	}
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		d.t.Fatalf("%s did not exit after %v; log:\n%s", d.name, sig, d.logs)
	}
	var ee *exec.ExitError
	if d.err != nil && !errors.As(d.err, &ee) {
		d.t.Fatal(d.err)
	}
	return d.cmd.ProcessState.ExitCode()
}

// waitLong polls cond until it holds, failing t after timeout with logs.
func waitLong(t *testing.T, what string, timeout time.Duration, cond func() bool, logs ...*lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			var all strings.Builder
			for _, l := range logs {
				all.WriteString(l.String())
			}
			t.Fatalf("timed out waiting for %s; log:\n%s", what, all.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orphansReset is the orphans_reset=N of the last "dispatcher started" line.
func orphansReset(logs string) int {
	m := regexp.MustCompile(`msg="dispatcher started".* orphans_reset=(\d+)`).FindAllStringSubmatch(logs, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// TestDispatchKill9Restart: the dispatcher is killed with SIGKILL under
// load and started again. The new one resets what the dead one had running
// and finishes everything. Only those messages may pass a stage twice (the
// dead one's workers may still commit what they were doing). The dead
// one's unwritten statistics are lost: what the new one writes must equal
// what it did, and the rows may be ahead of the statistics by no more than
// was in flight.
func TestDispatchKill9Restart(t *testing.T) {
	f := newFaultDB(t, "")
	const total = 300
	f.enqueue(total, pipeline("5ms"))
	a := startDispatch(t, "first dispatcher")
	waitLong(t, "a fifth done", time.Minute, func() bool { return f.count("done") >= total/5 }, a.logs)

	// Frozen, it holds its lock and claims nothing more: what is running
	// now is what it had in flight.
	a.signal(syscall.SIGSTOP)
	inflight := f.running()
	a.signal(syscall.SIGKILL)
	doneAt, failedAt, statsAt := f.count("done"), f.count("failed"), f.stats()
	if doneAt == total {
		t.Fatal("everything finished before the kill: the test proves nothing")
	}
	t.Logf("killed with %d done, %d in flight; statistics then: done %d", doneAt, len(inflight), statsAt.Done)

	b := startDispatch(t, "second dispatcher")
	b.waitLog("dispatcher started", 1)
	if n := orphansReset(b.logs.String()); n < 1 {
		t.Errorf("the restarted dispatcher reset %d orphans, want some", n)
	}
	f.waitSettled(b.logs)
	if code := b.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(inflight)
	if n := f.count("failed"); n != 0 {
		t.Errorf("%d messages failed", n)
	}
	end := f.stats()
	d := delta(statsAt, end)
	if d.Orphans < 1 {
		t.Errorf("orphans counted: %d", d.Orphans)
	}
	// The new dispatcher counted what it settled; the dead one's last
	// answers and the late commits of its workers went uncounted.
	doneRows := f.count("done") - doneAt
	if d.Done > doneRows || doneRows-d.Done > int64(len(inflight)) {
		t.Errorf("after the kill: dispatch_stats.done grew by %d, the done rows by %d (%d were in flight)", d.Done, doneRows, len(inflight))
	}
	if d.Claimed != d.Done+d.Failed+d.Paused+d.Requeued+d.Reset {
		t.Errorf("the second dispatcher: claimed %d != done %d + failed %d + paused %d + requeued %d + reset %d",
			d.Claimed, d.Done, d.Failed, d.Paused, d.Requeued, d.Reset)
	}
	_ = failedAt
}

// TestDispatchSigtermRestart: SIGTERM under load stops the dispatcher
// cleanly (exit 0, nothing left running, statistics equal to the rows); a
// new one finishes the rest; no stage is passed twice.
func TestDispatchSigtermRestart(t *testing.T) {
	f := newFaultDB(t, "")
	const total = 300
	f.enqueue(total, pipeline("5ms"))
	a := startDispatch(t, "first dispatcher")
	waitLong(t, "a fifth done", time.Minute, func() bool { return f.count("done") >= total/5 }, a.logs)
	if code := a.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	done := f.count("done")
	if done == total {
		t.Fatal("everything finished before SIGTERM: the test proves nothing")
	}
	if n := f.count("running"); n != 0 {
		t.Errorf("%d messages left running by a dispatcher stopped with SIGTERM", n)
	}
	statsA := f.stats()
	f.checkStats(queue.DispatchStats{}, statsA, done, f.count("failed"))

	b := startDispatch(t, "second dispatcher")
	b.waitLog("dispatcher started", 1)
	if n := orphansReset(b.logs.String()); n != 0 {
		t.Errorf("orphans_reset=%d after a clean stop, want 0", n)
	}
	f.waitSettled(b.logs)
	if code := b.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(nil)
	f.checkStats(queue.DispatchStats{}, f.stats(), f.count("done"), f.count("failed"))
	if n := f.count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
}

// startActiveAndStandby starts a dispatcher, waits until it runs, then
// starts a --standby one and waits until it waits for the lock.
func startActiveAndStandby(t *testing.T) (active, standby *daemon) {
	t.Helper()
	active = startDispatch(t, "active dispatcher")
	active.waitLog("dispatcher started", 1)
	standby = startDispatch(t, "standby", "--standby")
	standby.waitLog("standby: waiting for the dispatcher lock", 1)
	return active, standby
}

// TestDispatchStandbyTakeover: a --standby dispatcher waits while the
// active one works; the active one is killed with SIGKILL; the standby
// takes the lock over, resets the orphans and finishes everything.
func TestDispatchStandbyTakeover(t *testing.T) {
	f := newFaultDB(t, "")
	const total = 300
	f.enqueue(total, pipeline("5ms"))
	a, s := startActiveAndStandby(t)
	waitLong(t, "a fifth done", time.Minute, func() bool { return f.count("done") >= total/5 }, a.logs)
	if strings.Contains(s.logs.String(), "dispatcher started") {
		t.Fatalf("the standby started while the active one ran:\n%s", s.logs)
	}

	a.signal(syscall.SIGSTOP)
	inflight := f.running()
	doneAt, statsAt := f.count("done"), f.stats()
	a.signal(syscall.SIGKILL)
	if doneAt == total {
		t.Fatal("everything finished before the kill: the test proves nothing")
	}
	s.waitLog("standby: took over the dispatcher lock", 1)
	s.waitLog("dispatcher started", 1)
	if n := orphansReset(s.logs.String()); n < 1 {
		t.Errorf("the standby reset %d orphans, want those the killed one had running (%d)", n, len(inflight))
	}
	f.waitSettled(s.logs)
	if code := s.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(inflight)
	if n := f.count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
	d := delta(statsAt, f.stats())
	if doneRows := f.count("done") - doneAt; d.Done > doneRows || doneRows-d.Done > int64(len(inflight)) {
		t.Errorf("after the takeover: dispatch_stats.done grew by %d, the done rows by %d (%d were in flight)", d.Done, doneRows, len(inflight))
	}
}

// TestDispatchDatabaseRefused: with nothing listening where the DSN
// points, the dispatcher logs "database unavailable; retrying" and keeps
// trying: SIGTERM then ends it with exit 0; and when the server appears
// (here: a proxy to the test server opens its socket) it starts and works.
func TestDispatchDatabaseRefused(t *testing.T) {
	f := newFaultDB(t, "")
	cfg, err := pgx.ParseConfig(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	// A socket directory with nothing in it (short: socket paths are).
	dir, err := os.MkdirTemp("", "pepsi-nodb-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	port := 5432
	dsn := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", dir, port, cfg.Database, cfg.User)
	if cfg.Password != "" {
		dsn += " password=" + cfg.Password
	}
	t.Setenv("PEPSI_DSN", dsn)

	t.Run("SIGTERM", func(t *testing.T) {
		d := startDispatch(t, "dispatcher")
		d.waitLog("database unavailable; retrying", 2)
		if code := d.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("SIGTERM while retrying: exit %d, want 0", code)
		}
		logs := d.logs.String()
		if strings.Contains(logs, "goroutine ") || strings.Contains(logs, "panic") {
			t.Errorf("stack trace:\n%s", logs)
		}
		if !strings.Contains(logs, "dispatcher stopped") {
			t.Errorf("no 'dispatcher stopped' line:\n%s", logs)
		}
	})

	t.Run("server appears", func(t *testing.T) {
		f.enqueue(20, pipeline("1ms"))
		d := startDispatch(t, "dispatcher")
		d.waitLog("database unavailable; retrying", 2)
		proxy(t, filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", port)), cfg.Host, cfg.Port)
		d.waitLog("dispatcher started", 1)
		f.waitSettled(d.logs)
		if code := d.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("SIGTERM: exit %d, want 0", code)
		}
		f.checkEnd(nil)
		if n := f.count("done"); n != 20 {
			t.Errorf("%d done, want 20", n)
		}
	})
}

// proxy listens on the unix socket path and forwards each connection to
// the server at host:port (a socket directory or a TCP host), until t ends.
func proxy(t *testing.T, path, host string, port uint16) {
	t.Helper()
	network, addr := "tcp", net.JoinHostPort(host, strconv.Itoa(int(port)))
	if strings.HasPrefix(host, "/") {
		network, addr = "unix", filepath.Join(host, fmt.Sprintf(".s.PGSQL.%d", port))
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial(network, addr)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
}

// TestDispatchPayloads: a 0-byte payload (from SQL; pepsi enqueue refuses
// an empty file, with a clear error) and a 100 MiB one (from a file) go
// through all three stages, unchanged.
func TestDispatchPayloads(t *testing.T) {
	f := newFaultDB(t, "")
	bin := binary(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := exe(t, bin, "", "enqueue", "--stage", "parse", empty)
	r.wantCode(t, 1)
	r.wantOneError(t, empty+": empty input, nothing enqueued")

	big := make([]byte, 100<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	bigFile := filepath.Join(dir, "big")
	if err := os.WriteFile(bigFile, big, 0o644); err != nil {
		t.Fatal(err)
	}
	r = exe(t, bin, "", "enqueue", "--stage", "parse", bigFile)
	r.wantCode(t, 0)
	bigID, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil {
		t.Fatalf("enqueue printed %q", r.stdout)
	}
	var emptyID int64
	if err := f.db.Pool.QueryRow(context.Background(), "SELECT pepsi.enqueue('parse', ''::bytea)").Scan(&emptyID); err != nil {
		t.Fatal(err)
	}

	d := startDispatch(t, "dispatcher")
	f.waitSettled(d.logs)
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(nil)
	for _, id := range []int64{emptyID, bigID} {
		var status, stage string
		var passes int64
		err := f.db.Pool.QueryRow(context.Background(), `SELECT status, stage, (SELECT count(*) FROM test_passes p WHERE p.id = s.id)
			FROM pepsi.state s WHERE id = $1`, id).Scan(&status, &stage, &passes)
		if err != nil {
			t.Fatal(err)
		}
		if status != "done" || passes != 1 {
			t.Errorf("message %d: %s at %s after %d passes, want done after 1 (a message with no instructions finishes at parse)", id, status, stage, passes)
		}
	}
	var n int64
	var sum string
	err = f.db.Pool.QueryRow(context.Background(), "SELECT length(payload), md5(payload) FROM pepsi.message WHERE id = $1",
		bigID).Scan(&n, &sum)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", md5.Sum(big)); n != int64(len(big)) || sum != want {
		t.Errorf("the 100 MiB payload came back as %d bytes with md5 %s, want %d and %s", n, sum, len(big), want)
	}
	f.checkStats(queue.DispatchStats{}, f.stats(), f.count("done"), f.count("failed"))
}

// TestDispatchStandbySigterm: a standby stopped with SIGTERM while it waits
// for the lock exits 0, as a dispatcher does, not with an error.
func TestDispatchStandbySigterm(t *testing.T) {
	newFaultDB(t, "")
	a, s := startActiveAndStandby(t)
	if code := s.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("standby: exit %d on SIGTERM, want 0; log:\n%s", code, s.logs)
	}
	if logs := s.logs.String(); !strings.Contains(logs, "dispatcher stopped") || strings.Contains(logs, "context canceled") {
		t.Errorf("standby log:\n%s", logs)
	}
	if code := a.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("active: exit %d on SIGTERM, want 0", code)
	}
}

// TestDispatchLockLost: the active dispatcher's lock session is ended
// (pg_terminate_backend) while a standby waits; the standby takes the lock,
// and the active one, finding it gone when it reconnects, stops its workers
// and exits 1 saying so. The standby finishes the work.
func TestDispatchLockLost(t *testing.T) {
	f := newFaultDB(t, "")
	const total = 200
	f.enqueue(total, pipeline("5ms"))
	a, s := startActiveAndStandby(t)
	waitLong(t, "a fifth done", time.Minute, func() bool { return f.count("done") >= total/5 }, a.logs)
	holder := f.int64(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	inflight := f.running()
	f.int64("SELECT count(pg_terminate_backend($1))", holder)
	// What it claimed on its way out (before it saw its session gone) is
	// in flight too.
	for id := range f.running() {
		inflight[id] = true
	}
	select {
	case <-a.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the dispatcher that lost its lock did not exit; log:\n%s", a.logs)
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("the dispatcher that lost its lock exited %d, want 1", code)
	}
	if lines := strings.Split(strings.TrimSpace(a.logs.String()), "\n"); !strings.HasPrefix(lines[len(lines)-1], "pepsi dispatch: lost the dispatcher lock to another dispatcher") {
		t.Errorf("last line of its log: %q, want the reason", lines[len(lines)-1])
	}
	s.waitLog("dispatcher started", 1)
	f.waitSettled(s.logs)
	if code := s.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(inflight)
	if n := f.count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
}
