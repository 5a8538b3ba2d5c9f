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
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// faultDB is a site (testkit.Site: a migrated database with the test
// worker's tables, and a pepsi.conf, through PEPSI_CONFIG and PEPSI_DSN)
// of three stages parse → enrich → deliver run by the test worker, with
// extra keys in [pepsi-dispatch].
type faultDB struct {
	*testkit.Site
}

func newFaultDB(t *testing.T, dispatch string) *faultDB {
	t.Helper()
	return faultSite(t, "POLL_INTERVAL = 2\n"+dispatch)
}

// faultSite is newFaultDB's site with the [pepsi-dispatch] keys given
// (POLL_INTERVAL among them) besides the fault tests' own.
func faultSite(t *testing.T, dispatch string) *faultDB {
	t.Helper()
	worker := testkit.Worker(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "[pepsi-dispatch]\nSTATS_INTERVAL = 1\nSHUTDOWN_GRACE = 5\n"+
		"RECONNECT_MIN = 0.1\nRECONNECT_MAX = 1\nORPHAN_SWEEP = 2\n%s\n", dispatch)
	for _, s := range []string{"parse", "enrich", "deliver"} {
		fmt.Fprintf(&conf, "\n[stage-%s]\nPROGRAM = %s\nPARALLELISM = 2\nQUEUE_LIMIT = 4\n", s, worker)
	}
	site := testkit.NewSite(t, conf.String())
	site.WorkerTables()
	t.Setenv("PEPSI_DSN", site.DSN)
	t.Setenv("PEPSI_CONFIG", site.Path)
	return &faultDB{site}
}

// pipeline is a payload that goes through the three stages, each sleeping
// for sleep first.
func pipeline(sleep string) string {
	return "@sleep=" + sleep + " parse=advance:enrich enrich=advance:deliver deliver=finish"
}

// enqueue puts n messages with payload at parse.
func (f *faultDB) enqueue(n int, payload string) {
	f.T.Helper()
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(payload)
	}
	f.Enqueue("parse", ps...)
}

// running returns the ids of the running messages.
func (f *faultDB) running() map[int64]bool {
	f.T.Helper()
	m := make(map[int64]bool)
	for _, id := range f.IDs("SELECT id FROM pepsi.state WHERE status = 'running'") {
		m[id] = true
	}
	return m
}

// stats reads dispatch_stats.
func (f *faultDB) stats() queue.DispatchStats {
	f.T.Helper()
	_, g, err := f.DB.ReadStats(context.Background())
	if err != nil {
		f.T.Fatal(err)
	}
	return g
}

// settleTimeout is how long the fault tests wait for every message to be
// done or failed.
const settleTimeout = 3 * time.Minute

// checkEnd checks what must hold once every dispatcher has stopped
// (testkit.CheckInvariants, Settled and checks): no message lost, every one
// done or failed and every failure explained, the statistics equal to the
// rows unless testkit.RowsOnly (a dispatcher was killed, its last counts
// lost); and no stage passed twice except by a message in inflight (nil:
// none may be).
func (f *faultDB) checkEnd(inflight map[int64]bool, checks ...testkit.Check) {
	f.T.Helper()
	f.Check(append(checks, testkit.Settled)...)
	testkit.CheckPassedOnce(f.T, f.DB, inflight)
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
	logs   *testkit.Buffer
	exited chan struct{}
	err    error
}

// startDispatch starts the binary with args after "dispatch"; it is
// killed when the test ends, and its log shown if the test failed.
func startDispatch(t *testing.T, name string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"dispatch"}, args...)...)
	d := &daemon{t: t, name: name, cmd: cmd, logs: &testkit.Buffer{}, exited: make(chan struct{})}
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
	testkit.Wait(d.t, fmt.Sprintf("%s to log %q", d.name, s), time.Minute, func() bool {
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
	testkit.Wait(t, "a fifth done", time.Minute, func() bool { return f.Count("done") >= total/5 }, a.logs)

	// Frozen, it holds its lock and claims nothing more: what is running
	// now is what it had in flight.
	a.signal(syscall.SIGSTOP)
	inflight := f.running()
	a.signal(syscall.SIGKILL)
	doneAt, failedAt, statsAt := f.Count("done"), f.Count("failed"), f.stats()
	if doneAt == total {
		t.Fatal("everything finished before the kill: the test proves nothing")
	}
	t.Logf("killed with %d done, %d in flight; statistics then: done %d", doneAt, len(inflight), statsAt.Done)

	// The server ends the dead one's sessions, and frees its lock, once it
	// sees their connections closed: a start before that is refused, as
	// another dispatcher's would be.
	gone := fmt.Sprintf("pepsi dispatch%% pid %d on %%", a.cmd.Process.Pid)
	testkit.Wait(t, "the killed dispatcher's sessions ended", time.Minute, func() bool {
		return f.Int64("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1", gone) == 0
	})
	b := startDispatch(t, "second dispatcher")
	b.waitLog("dispatcher started", 1)
	if n := orphansReset(b.logs.String()); n < 1 {
		t.Errorf("the restarted dispatcher reset %d orphans, want some", n)
	}
	f.WaitSettled(settleTimeout, b.logs)
	if code := b.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(inflight, testkit.RowsOnly)
	if n := f.Count("failed"); n != 0 {
		t.Errorf("%d messages failed", n)
	}
	end := f.stats()
	d := delta(statsAt, end)
	if d.Orphans < 1 {
		t.Errorf("orphans counted: %d", d.Orphans)
	}
	// The new dispatcher counted what it settled; the dead one's last
	// answers and the late commits of its workers went uncounted.
	doneRows := f.Count("done") - doneAt
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
	testkit.Wait(t, "a fifth done", time.Minute, func() bool { return f.Count("done") >= total/5 }, a.logs)
	if code := a.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	done := f.Count("done")
	if done == total {
		t.Fatal("everything finished before SIGTERM: the test proves nothing")
	}
	f.Check() // nothing left running, the statistics equal to the rows

	b := startDispatch(t, "second dispatcher")
	b.waitLog("dispatcher started", 1)
	if n := orphansReset(b.logs.String()); n != 0 {
		t.Errorf("orphans_reset=%d after a clean stop, want 0", n)
	}
	f.WaitSettled(settleTimeout, b.logs)
	if code := b.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(nil)
	if n := f.Count("done"); n != total {
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
	testkit.Wait(t, "a fifth done", time.Minute, func() bool { return f.Count("done") >= total/5 }, a.logs)
	if strings.Contains(s.logs.String(), "dispatcher started") {
		t.Fatalf("the standby started while the active one ran:\n%s", s.logs)
	}

	a.signal(syscall.SIGSTOP)
	inflight := f.running()
	doneAt, statsAt := f.Count("done"), f.stats()
	a.signal(syscall.SIGKILL)
	if doneAt == total {
		t.Fatal("everything finished before the kill: the test proves nothing")
	}
	s.waitLog("standby: took over the dispatcher lock", 1)
	s.waitLog("dispatcher started", 1)
	if n := orphansReset(s.logs.String()); n < 1 {
		t.Errorf("the standby reset %d orphans, want those the killed one had running (%d)", n, len(inflight))
	}
	f.WaitSettled(settleTimeout, s.logs)
	if code := s.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(inflight, testkit.RowsOnly)
	if n := f.Count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
	d := delta(statsAt, f.stats())
	if doneRows := f.Count("done") - doneAt; d.Done > doneRows || doneRows-d.Done > int64(len(inflight)) {
		t.Errorf("after the takeover: dispatch_stats.done grew by %d, the done rows by %d (%d were in flight)", d.Done, doneRows, len(inflight))
	}
}

// TestDispatchDatabaseRefused: with nothing listening where the DSN
// points, the dispatcher logs "database unavailable; retrying" and keeps
// trying: SIGTERM then ends it with exit 0; and when the server appears
// (here: a proxy to the test server opens its socket) it starts and works.
func TestDispatchDatabaseRefused(t *testing.T) {
	f := newFaultDB(t, "")
	cfg, err := pgx.ParseConfig(f.DSN)
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
		f.WaitSettled(settleTimeout, d.logs)
		if code := d.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("SIGTERM: exit %d, want 0", code)
		}
		f.checkEnd(nil)
		if n := f.Count("done"); n != 20 {
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
	if err := f.DB.Pool.QueryRow(context.Background(), "SELECT pepsi.enqueue('parse', ''::bytea)").Scan(&emptyID); err != nil {
		t.Fatal(err)
	}

	d := startDispatch(t, "dispatcher")
	f.WaitSettled(settleTimeout, d.logs)
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(nil)
	for _, id := range []int64{emptyID, bigID} {
		var status, stage string
		var passes int64
		err := f.DB.Pool.QueryRow(context.Background(), `SELECT status, stage, (SELECT count(*) FROM test_passes p WHERE p.id = s.id)
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
	err = f.DB.Pool.QueryRow(context.Background(), "SELECT length(payload), md5(payload) FROM pepsi.message WHERE id = $1",
		bigID).Scan(&n, &sum)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", md5.Sum(big)); n != int64(len(big)) || sum != want {
		t.Errorf("the 100 MiB payload came back as %d bytes with md5 %s, want %d and %s", n, sum, len(big), want)
	}
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
	testkit.Wait(t, "a fifth done", time.Minute, func() bool { return f.Count("done") >= total/5 }, a.logs)
	// The listener session: it holds the session locks exclusive (the
	// queue sessions take the stages' fence locks shared, per transaction).
	holder := f.Int64(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1`)
	inflight := f.running()
	f.Int64("SELECT count(pg_terminate_backend($1))", holder)
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
	f.WaitSettled(settleTimeout, s.logs)
	if code := s.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	f.checkEnd(inflight, testkit.RowsOnly)
	if n := f.Count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
}
