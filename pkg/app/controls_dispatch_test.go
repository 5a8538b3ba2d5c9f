package app

// The controls under the real `pepsi dispatch` and the test worker:
// scheduled messages claimed at their time, a paused stage honoured by a
// running dispatcher and after a restart, a held message keeping its
// key's place, and cancel, of a running message too.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// ctlSite is a site whose stages (NAME, then keys) the test worker runs,
// with PEPSI_DSN and PEPSI_CONFIG set for pepsi and the binary. Its
// POLL_INTERVAL is long: what the tests see is not the heartbeat's doing.
func ctlSite(t *testing.T, dispatch string, stages ...string) *testkit.Site {
	t.Helper()
	worker := testkit.Worker(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "[pepsi-dispatch]\nPOLL_INTERVAL = 300\nSTATS_INTERVAL = 1\nSHUTDOWN_GRACE = 5\n%s\n", dispatch)
	for _, s := range stages {
		name, keys, _ := strings.Cut(s, "\n")
		fmt.Fprintf(&conf, "\n[stage-%s]\nPROGRAM = %s\nPARALLELISM = 2\nQUEUE_LIMIT = 2\n%s\n", name, worker, keys)
	}
	site := testkit.NewSite(t, conf.String())
	site.WorkerTables()
	// For blockPass: a pass is recorded once.
	if _, err := site.DB.Pool.Exec(context.Background(), "CREATE UNIQUE INDEX test_passes_once ON test_passes (id, stage)"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PEPSI_DSN", site.DSN)
	t.Setenv("PEPSI_CONFIG", site.Path)
	return site
}

// enqueueCLI runs pepsi enqueue with args and stdin, and returns the ids.
func enqueueCLI(t *testing.T, stdin string, args ...string) []int64 {
	t.Helper()
	r := pepsi(t, stdin, append([]string{"enqueue"}, args...)...)
	r.wantCode(t, 0)
	var out []int64
	for _, s := range strings.Fields(r.stdout) {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("enqueue printed %q", r.stdout)
		}
		out = append(out, id)
	}
	return out
}

// statusOf is a message's status.
func statusOf(s *testkit.Site, id int64) string {
	s.T.Helper()
	var st string
	if err := s.DB.Pool.QueryRow(context.Background(), "SELECT status FROM pepsi.state WHERE id = $1", id).Scan(&st); err != nil {
		s.T.Fatalf("status of %d: %v", id, err)
	}
	return st
}

// blockPass holds the test worker's pass of id at stage mid-way, until
// the returned function is called: the worker records a pass (test_passes,
// unique at a ctlSite) and makes its move in one transaction, and the
// test's own uncommitted record of the same pass makes the worker's wait
// for it. The message is running, its worker busy with it, and nothing is
// committed.
func blockPass(s *testkit.Site, id int64, stage string) (release func()) {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := s.DB.Pool.Begin(context.Background())
	if err != nil {
		s.T.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO test_passes (id, stage, pid) VALUES ($1, $2, 0)", id, stage); err != nil {
		s.T.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.Background())
		}
	}
	s.T.Cleanup(release)
	return release
}

// waitBlocked waits until a test worker waits on a lock, in its pass.
func waitBlocked(s *testkit.Site, logs fmt.Stringer) {
	s.T.Helper()
	s.WaitFor("a test worker blocked in its pass", time.Minute, func() bool {
		// The wait for the test's record of the pass, not any lock wait: a
		// read of the queue waits a moment for the janitor's new partitions.
		return s.Int64(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'testworker pid %'
			  AND wait_event_type = 'Lock' AND wait_event = 'transactionid' AND query LIKE 'INSERT INTO test_passes %'`) == 1
	}, logs)
}

// TestDispatchScheduledWake: messages scheduled with pepsi enqueue --at
// while the dispatcher is idle are claimed in the order of their times,
// not of their ids, each at its time or later and within 50 ms of it: the
// dispatcher sleeps until the earliest, as for a retry, and does not poll
// (POLL_INTERVAL is 300 s). The claim time is the database's, recorded by
// a trigger on the claim's UPDATE.
func TestDispatchScheduledWake(t *testing.T) {
	s := ctlSite(t, "", "parse")
	ctx := context.Background()
	if _, err := s.DB.Pool.Exec(ctx, `
		CREATE TABLE test_claims (id bigint, at timestamptz DEFAULT clock_timestamp());
		CREATE FUNCTION test_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO test_claims (id) VALUES (NEW.id); RETURN NULL; END $$;
		CREATE TRIGGER test_claimed AFTER UPDATE ON pepsi.state_live FOR EACH ROW
		  WHEN (NEW.status = 'running' AND OLD.status = 'pending') EXECUTE FUNCTION test_claimed()`); err != nil {
		t.Fatal(err)
	}
	d := startDispatch(t, "dispatcher")
	d.waitLog("dispatcher started", 1)
	// Idle: armed, waiting for a notification.
	s.WaitFor("the dispatcher armed", time.Minute, func() bool {
		return s.Int64("SELECT count(*) FROM pepsi.wake WHERE armed") == 1
	}, d.logs)

	t0 := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	offsets := []time.Duration{900 * time.Millisecond, 0, 400 * time.Millisecond} // ids in this order
	var ids []int64
	dueOf := map[int64]time.Time{}
	for _, off := range offsets {
		id := enqueueCLI(t, "x", "--stage", "parse", "--at", t0.Add(off).Format(time.RFC3339Nano))[0]
		ids = append(ids, id)
		dueOf[id] = t0.Add(off)
	}
	if time.Now().After(t0) {
		t.Fatal("enqueueing took longer than the test allows: its first message was due before the last was enqueued")
	}
	s.WaitFor("three claims", time.Minute, func() bool { return s.Int64("SELECT count(*) FROM test_claims") == 3 }, d.logs)
	rows, err := s.DB.Pool.Query(ctx, "SELECT id, at FROM test_claims ORDER BY at")
	if err != nil {
		t.Fatal(err)
	}
	var order []int64
	var id int64
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		order = append(order, id)
		due := dueOf[id]
		late := at.Sub(due)
		t.Logf("message %d: due %s, claimed %v after", id, due.Format("15:04:05.000"), late)
		if late < 0 {
			t.Errorf("message %d claimed %v before its time", id, -late)
		}
		if late > 50*time.Millisecond {
			t.Errorf("message %d claimed %v after its time, want within 50ms", id, late)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{ids[1], ids[2], ids[0]}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("claimed in the order %v, want the order of their times %v", order, want)
	}
	s.WaitSettled(time.Minute, d.logs)
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	s.Check(testkit.Settled)
}

// TestDispatchPauseStage: a stage paused while its dispatcher runs is
// handed nothing from the next claim on (the claim that took a message
// enqueued after the pause at another stage took none of it); its message
// in flight finishes; the pause shows in /metrics and outlasts a restart;
// resumed, the stage's waiting messages run.
func TestDispatchPauseStage(t *testing.T) {
	s := ctlSite(t, "METRICS_LISTEN = 127.0.0.1:0", "parse", "enrich")
	d := startDispatch(t, "first dispatcher")
	d.waitLog("dispatcher started", 1)
	url := metricsAddr(t, d)

	// A message in flight at parse, held in its pass.
	inflight := enqueueCLI(t, "x", "--stage", "parse")[0]
	release := blockPass(s, inflight, "parse")
	waitBlocked(s, d.logs)

	r := pepsi(t, "", "queue", "pause", "--stage", "parse", "--reason", "the parser's database is down")
	r.wantCode(t, 0)
	waiting := enqueueCLI(t, "a\nb\nc\n", "--stage", "parse", "--lines")
	// A message at another stage, enqueued after them: the claim that
	// takes it was asked for parse too, and took nothing there.
	other := enqueueCLI(t, "x", "--stage", "enrich")[0]
	s.WaitFor("enrich's message done", time.Minute, func() bool { return statusOf(s, other) == "done" }, d.logs)
	for _, id := range waiting {
		if st := statusOf(s, id); st != "pending" {
			t.Fatalf("message %d at the paused stage is %s", id, st)
		}
	}
	if st := statusOf(s, inflight); st != "running" {
		t.Fatalf("the message in flight is %s", st)
	}
	_, body := testkit.Get(t, url+"/metrics")
	for _, want := range []string{`pepsi_stage_paused{stage="parse"} 1`, `pepsi_stage_paused{stage="enrich"} 0`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "pepsi_stage_paused"))
		}
	}
	// The message in flight finishes.
	release()
	s.WaitFor("the message in flight done", time.Minute, func() bool { return statusOf(s, inflight) == "done" }, d.logs)

	// A restart keeps the pause.
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	d2 := startDispatch(t, "second dispatcher")
	d2.waitLog("dispatcher started", 1)
	other = enqueueCLI(t, "x", "--stage", "enrich")[0]
	s.WaitFor("enrich's message done", time.Minute, func() bool { return statusOf(s, other) == "done" }, d2.logs)
	for _, id := range waiting {
		if st := statusOf(s, id); st != "pending" {
			t.Fatalf("after a restart, message %d at the paused stage is %s", id, st)
		}
	}
	r = pepsi(t, "", "queue")
	if !strings.Contains(r.stdout, "stage parse: paused by "+osUser()+" at ") || !strings.Contains(r.stdout, "): the parser's database is down\n") {
		t.Errorf("summary:\n%s", r.stdout)
	}
	pepsi(t, "", "queue", "resume", "--stage", "parse").wantCode(t, 0)
	s.WaitSettled(time.Minute, d2.logs)
	if code := d2.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	s.Check(testkit.Settled)
}

// TestDispatchHoldKeepsKeyPlace: at a stage with KEY and KEY_LIMIT 1, a
// held message keeps its key's place: its key's later message waits
// behind it (pepsi queue show says so) while another key's passes; once
// released, it passes first, then the one behind it.
func TestDispatchHoldKeepsKeyPlace(t *testing.T) {
	s := ctlSite(t, "", "deliver\nKEY = header:customer\nKEY_LIMIT = 1")
	first := enqueueCLI(t, "x", "--stage", "deliver", "--header", "customer=a")[0]
	second := enqueueCLI(t, "x", "--stage", "deliver", "--header", "customer=a")[0]
	other := enqueueCLI(t, "x", "--stage", "deliver", "--header", "customer=b")[0]
	r := pepsi(t, "", "queue", "hold", strconv.FormatInt(first, 10))
	r.wantCode(t, 0)

	d := startDispatch(t, "dispatcher")
	s.WaitFor("customer b's message done", time.Minute, func() bool { return statusOf(s, other) == "done" }, d.logs)
	// The claim that took b's message had a's second in its window.
	if st := statusOf(s, second); st != "pending" {
		t.Fatalf("customer a's second message is %s while the first is held", st)
	}
	if st := statusOf(s, first); st != "held" {
		t.Fatalf("the held message is %s", st)
	}
	r = pepsi(t, "", "queue", "show", strconv.FormatInt(second, 10))
	if want := fmt.Sprintf("flow_key        a (waits behind %d)\n", first); !strings.Contains(r.stdout, want) {
		t.Errorf("show of the message behind the held one lacks %q:\n%s", want, r.stdout)
	}
	pepsi(t, "", "queue", "release", strconv.FormatInt(first, 10)).wantCode(t, 0)
	s.WaitSettled(time.Minute, d.logs)
	var order []int64
	rows, err := s.DB.Pool.Query(context.Background(), "SELECT id FROM test_passes WHERE id = ANY($1) ORDER BY at", []int64{first, second})
	if err == nil {
		order, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil || fmt.Sprint(order) != fmt.Sprint([]int64{first, second}) {
		t.Errorf("customer a's messages passed in the order %v (%v), want %d then %d", order, err, first, second)
	}
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	s.Check(testkit.Settled)
}

// TestDispatchCancel: pepsi queue cancel of a pending, a paused
// (scheduled), a held and a running message under a running dispatcher.
// All four end cancelled, "cancelled by USER", their keys free: the
// running one is left alone (exit 1) until --force, which cancels it in
// its pass: the stage's move is refused when the pass ends, so its work
// rolls back (no pass recorded) and the dispatcher leaves the row as the
// cancel left it. Nothing is counted failed: the statistics count the
// cut-short pass cancelled, at its stage (not failed, though the stage
// answered non-zero when its move was refused) and in dispatch_stats,
// where every claim is settled once.
func TestDispatchCancel(t *testing.T) {
	s := ctlSite(t, "", "parse", "work")
	d := startDispatch(t, "dispatcher")
	d.waitLog("dispatcher started", 1)
	pepsi(t, "", "queue", "pause", "--stage", "parse").wantCode(t, 0)
	pend := enqueueCLI(t, "x", "--stage", "parse", "--key", "p1")[0]
	sched := enqueueCLI(t, "x", "--stage", "parse", "--key", "s1", "--delay", "1h")[0]
	held := enqueueCLI(t, "x", "--stage", "parse", "--key", "h1")[0]
	pepsi(t, "", "queue", "hold", strconv.FormatInt(held, 10)).wantCode(t, 0)

	run := enqueueCLI(t, "x", "--stage", "work")[0]
	release := blockPass(s, run, "work")
	waitBlocked(s, d.logs)

	r := pepsi(t, "", "queue", "cancel", strconv.FormatInt(pend, 10), strconv.FormatInt(sched, 10), strconv.FormatInt(held, 10))
	r.wantCode(t, 0)
	if r.stdout != "cancelled 3 messages\n" {
		t.Errorf("cancel: %q", r.stdout)
	}
	r = pepsi(t, "", "queue", "cancel", strconv.FormatInt(run, 10))
	r.wantCode(t, 1)
	if !strings.Contains(r.stderr, "left 1 running message alone: held by the running dispatcher (pepsi dispatch pid ") {
		t.Errorf("cancel of a running message: %q", r.stderr)
	}
	if st := statusOf(s, run); st != "running" {
		t.Fatalf("running message after a cancel without --force: %s", st)
	}
	r = pepsi(t, "", "queue", "cancel", "--force", strconv.FormatInt(run, 10))
	r.wantCode(t, 0)
	// The pass ends: its move (pepsi.finish) is refused, its work undone,
	// and the dispatcher's settle leaves the row alone.
	release()
	s.WaitFor("the cancelled pass counted", time.Minute, func() bool {
		return s.Int64("SELECT coalesce(sum(cancelled), 0) FROM pepsi.stage_stats WHERE stage = 'work'") == 1
	}, d.logs)
	reason := admin.CancelReason(osUser())
	for _, id := range []int64{pend, sched, held, run} {
		var st, stage, e string
		if err := s.DB.Pool.QueryRow(context.Background(), "SELECT status, stage, coalesce(error, '') FROM pepsi.state WHERE id = $1", id).
			Scan(&st, &stage, &e); err != nil {
			t.Fatal(err)
		}
		if st != "cancelled" || e != reason {
			t.Errorf("message %d: %s at %s, error %q; want cancelled, %q", id, st, stage, e, reason)
		}
	}
	if n := s.Int64("SELECT count(*) FROM test_passes WHERE id = $1 AND pid <> 0", run); n != 0 {
		t.Errorf("the cancelled pass of %d committed its work", n)
	}
	for _, k := range []string{"p1", "s1", "h1"} {
		id := enqueueCLI(t, "x", "--stage", "parse", "--key", k)[0]
		if id == pend || id == sched || id == held {
			t.Errorf("key %s of a cancelled message is not free: got its id %d", k, id)
		}
	}
	pepsi(t, "", "queue", "resume", "--stage", "parse").wantCode(t, 0)
	s.WaitSettled(time.Minute, d.logs)
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	s.Check()
	wantCancelStats(t, s, "work", 1)
}

// wantCancelStats checks that nothing was counted failed, and that the
// passes cut short by a cancel were counted cancelled, n of them, at stage
// and in dispatch_stats.
func wantCancelStats(t *testing.T, s *testkit.Site, stage string, n int64) {
	t.Helper()
	stages, g, err := s.DB.ReadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g.Failed != 0 || g.Cancelled != n {
		t.Errorf("dispatch_stats: failed %d, cancelled %d; want 0 and %d", g.Failed, g.Cancelled, n)
	}
	for _, st := range stages {
		if st.Stage == stage && (st.Failed != 0 || st.Processed != 0 || st.Cancelled != n) {
			t.Errorf("stage_stats of %s: processed %d, failed %d, cancelled %d; want 0, 0, %d", stage, st.Processed, st.Failed, st.Cancelled, n)
		}
	}
	if n := s.Count(string(queue.Failed)); n != 0 {
		t.Errorf("%d messages failed", n)
	}
}

// TestDispatchCancelAnsweredMove is issue 54's reproduction: a stage that
// makes its move on its status line ("0 done") answers after its message
// was cancelled with --force. The move is not made (the message stays
// cancelled), and the pass is counted cancelled: not processed at its
// stage, not a failed message in dispatch_stats.
func TestDispatchCancelAnsweredMove(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	s := testkit.NewSite(t, fmt.Sprintf(`[pepsi-dispatch]
POLL_INTERVAL = 300
STATS_INTERVAL = 1

[stage-a]
PROGRAM = /bin/sh -c "while read id; do while [ ! -e %s ]; do sleep 0.02; done; echo '0 done'; done"
PARALLELISM = 1
`, gate))
	t.Setenv("PEPSI_DSN", s.DSN)
	t.Setenv("PEPSI_CONFIG", s.Path)
	d := startDispatch(t, "dispatcher")
	d.waitLog("dispatcher started", 1)
	id := enqueueCLI(t, "x", "--stage", "a")[0]
	s.WaitFor("the message running", time.Minute, func() bool { return statusOf(s, id) == "running" }, d.logs)
	pepsi(t, "", "queue", "cancel", "--force", strconv.FormatInt(id, 10)).wantCode(t, 0)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.WaitFor("the cancelled pass counted", time.Minute, func() bool {
		return s.Int64("SELECT coalesce(sum(cancelled), 0) FROM pepsi.dispatch_stats") == 1
	}, d.logs)
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	if st := statusOf(s, id); st != "cancelled" {
		t.Errorf("message %d: %s, want cancelled", id, st)
	}
	s.Check(testkit.Settled)
	wantCancelStats(t, s, "a", 1)
}
