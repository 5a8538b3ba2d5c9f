package app

// Stage sets: several `pepsi dispatch --stages` processes share one
// database, each owning its stages; a --standby per set takes over.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// newSetsDB is a faultDB whose dispatchers hear of work only by
// notification: POLL_INTERVAL is a minute, longer than the tests wait for
// everything to settle, so a message that waited for the heartbeat (a
// settle into another set's stage that did not wake its owner) fails them.
func newSetsDB(t *testing.T) *faultDB {
	t.Helper()
	return faultSite(t, "POLL_INTERVAL = 60")
}

// setsWait is how long the stage-set tests wait for every message to
// settle: well under POLL_INTERVAL.
const setsWait = 40 * time.Second

// startSet starts a dispatcher of one stage set and waits until it runs.
func startSet(t *testing.T, stages string) *daemon {
	t.Helper()
	d := startDispatch(t, stages+" dispatcher", "--stages", stages)
	d.waitLog("dispatcher started", 1)
	return d
}

// exitOf waits for d to exit by itself and returns its exit status.
func exitOf(t *testing.T, d *daemon) int {
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit; log:\n%s", d.name, d.logs)
	}
	var ee *exec.ExitError
	if d.err != nil && !errors.As(d.err, &ee) {
		t.Fatal(d.err)
	}
	return d.cmd.ProcessState.ExitCode()
}

// workerStages lists the stages a dispatcher's log says it started workers of.
func workerStages(logs string) map[string]bool {
	m := make(map[string]bool)
	for _, s := range regexp.MustCompile(`msg="worker: testworker ready" stage=(\S+)`).FindAllStringSubmatch(logs, -1) {
		m[s[1]] = true
	}
	return m
}

// TestDispatchStageSets: three dispatchers, one per stage of parse →
// enrich → deliver, all on one database. Overlapping starts are refused
// naming the stage and its owner; each dispatcher starts only its own
// stage's workers; every message passes every stage once, woken across
// sets by notification; after clean stops nothing is left running and the
// statistics equal the rows, each stage's counted by its owner.
func TestDispatchStageSets(t *testing.T) {
	f := newSetsDB(t)
	p, e, d := startSet(t, "parse"), startSet(t, "enrich"), startSet(t, "deliver")

	// Overlaps: a set sharing a stage, and a dispatcher of every stage.
	for _, args := range [][]string{{"--stages", "deliver,parse"}, {}} {
		o := startDispatch(t, fmt.Sprintf("overlapping dispatcher %q", args), args...)
		if code := exitOf(t, o); code != 1 {
			t.Errorf("%v: exit %d, want 1; log:\n%s", args, code, o.logs)
		}
		want := fmt.Sprintf("stage parse is owned by pepsi dispatch pid %d on ", p.cmd.Process.Pid)
		if len(args) > 0 {
			want = fmt.Sprintf("stage deliver is owned by pepsi dispatch pid %d on ", d.cmd.Process.Pid)
		}
		if !strings.Contains(o.logs.String(), want) {
			t.Errorf("%v: the refusal does not say %q:\n%s", args, want, o.logs)
		}
	}
	// An unknown stage is a usage error.
	u := startDispatch(t, "unknown stage", "--stages", "parse,nosuch")
	if code := exitOf(t, u); code != 2 || !strings.Contains(u.logs.String(), `unknown stage "nosuch"`) {
		t.Errorf("--stages parse,nosuch: exit %d, want 2 with the stage named; log:\n%s", code, u.logs)
	}

	const total = 600
	start := time.Now()
	f.enqueue(total/2, pipeline("2ms"))
	// The other half from SQL: into pepsi.ingress, admitted by whichever
	// dispatcher polls first; parse's owner claims them.
	if _, err := f.DB.Pool.Exec(context.Background(), "SELECT pepsi.enqueue('parse', convert_to($1, 'UTF8')) FROM generate_series(1, $2)",
		pipeline("2ms"), total-total/2); err != nil {
		t.Fatal(err)
	}
	f.WaitSettled(setsWait, p.logs, e.logs, d.logs)
	took := time.Since(start)

	// queue summary names each stage's owner; with deliver's dispatcher
	// stopped, that deliver has none.
	r := pepsi(t, "", "queue", "summary")
	for _, x := range []*daemon{p, e, d} {
		stage := strings.TrimSuffix(x.name, " dispatcher")
		want := fmt.Sprintf("stage %s: owned by pepsi dispatch pid %d on ", stage, x.cmd.Process.Pid)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("queue summary does not say %q:\n%s", want, r.stdout)
		}
	}
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("%s: SIGTERM: exit %d, want 0", d.name, code)
	}
	if r := pepsi(t, "", "queue", "summary"); !strings.Contains(r.stdout, "stage deliver: no owner (its messages wait)\n") {
		t.Errorf("queue summary with deliver's dispatcher stopped:\n%s", r.stdout)
	}
	for _, x := range []*daemon{p, e} {
		if code := x.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: SIGTERM: exit %d, want 0", x.name, code)
		}
	}
	t.Logf("%d messages through 3 stages, one dispatcher each, in %v", total, took.Round(time.Millisecond))
	f.checkEnd(nil)
	if n := f.Count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
	for _, x := range []struct {
		d     *daemon
		stage string
	}{{p, "parse"}, {e, "enrich"}, {d, "deliver"}} {
		if got := workerStages(x.d.logs.String()); len(got) != 1 || !got[x.stage] {
			t.Errorf("%s started workers of %v, want %s only", x.d.name, got, x.stage)
		}
		// Each stage's statistics are written by its owner only.
		if n := f.Int64("SELECT coalesce(sum(processed), 0) FROM pepsi.stage_stats WHERE stage = $1 AND dispatcher = $1", x.stage); n != total {
			t.Errorf("stage_stats of %s written by its set: processed %d, want %d", x.stage, n, total)
		}
	}
	if n := f.Int64("SELECT count(*) FROM pepsi.stage_stats WHERE stage <> dispatcher"); n != 0 {
		t.Errorf("%d stage_stats rows written by a dispatcher that does not own the stage", n)
	}
}

// freezeHolding stops d (SIGSTOP) once at least done messages are done and
// it holds rows it handed out at stage, and returns those rows, wherever
// its workers moved them. d's stage is fed by the stage before it, and may
// be idle for a moment between its messages: frozen in such a moment, it
// is continued and frozen again later.
func freezeHolding(t *testing.T, f *faultDB, d *daemon, stage string, done int64) map[int64]bool {
	t.Helper()
	held := "SELECT id FROM pepsi.state WHERE status = 'running' AND coalesce(handed, stage) = $1"
	for try := 1; ; try++ {
		testkit.Wait(t, fmt.Sprintf("%d done and %s's dispatcher holding rows", done, stage), time.Minute, func() bool {
			return f.Count("done") >= done && len(f.IDs(held, stage)) > 0
		}, d.logs)
		d.signal(syscall.SIGSTOP)
		inflight := make(map[int64]bool)
		for _, id := range f.IDs(held, stage) {
			inflight[id] = true
		}
		if len(inflight) > 0 || try == 50 {
			return inflight
		}
		if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDispatchStageSetTakeover: the same three dispatchers with a
// --standby for the middle one; the active middle one is killed with -9
// under load. The standby takes over enrich (and only it), resets its
// orphans, and every message still passes every stage; only what the
// killed one had running may pass enrich twice.
func TestDispatchStageSetTakeover(t *testing.T) {
	f := newSetsDB(t)
	p, e, d := startSet(t, "parse"), startSet(t, "enrich"), startSet(t, "deliver")
	s := startDispatch(t, "enrich standby", "--stages", "enrich", "--standby")
	s.waitLog("standby: waiting for the dispatcher lock", 1)
	if !strings.Contains(s.logs.String(), fmt.Sprintf("stage enrich is owned by pepsi dispatch pid %d on ", e.cmd.Process.Pid)) {
		t.Errorf("the standby does not say whom it waits for:\n%s", s.logs)
	}

	const total = 1000
	f.enqueue(total, pipeline("4ms"))
	inflight := freezeHolding(t, f, e, "enrich", total/5)
	doneAt := f.Count("done")
	killed := time.Now()
	e.signal(syscall.SIGKILL)
	if doneAt == total {
		t.Fatal("everything finished before the kill: the test proves nothing")
	}
	s.waitLog("dispatcher started", 1)
	takeover := time.Since(killed)
	if n := orphansReset(s.logs.String()); n < 1 {
		t.Errorf("the standby reset %d orphans, want those the killed one had running at enrich (%d)", n, len(inflight))
	}
	f.WaitSettled(setsWait, p.logs, s.logs, d.logs)
	for _, x := range []*daemon{p, s, d} {
		if code := x.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: SIGTERM: exit %d, want 0", x.name, code)
		}
	}
	t.Logf("%d messages; killed with %d done and %d of its rows running; the standby took over in %v",
		total, doneAt, len(inflight), takeover.Round(time.Millisecond))
	f.checkEnd(inflight, testkit.RowsOnly)
	if n := f.Count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
	if got := workerStages(s.logs.String()); len(got) != 1 || !got["enrich"] {
		t.Errorf("the standby started workers of %v, want enrich only", got)
	}
	// The other sets were not disturbed: neither reset or swept anything.
	// (Rows the killed one's workers advanced to deliver are still its:
	// handed out at enrich, they are the standby's to reset.)
	for _, x := range []*daemon{p, d} {
		if n := orphansReset(x.logs.String()); n != 0 {
			t.Errorf("%s reset %d orphans at start, want 0", x.name, n)
		}
		if strings.Contains(x.logs.String(), "reset running rows no worker holds") {
			t.Errorf("%s swept orphans: the killed dispatcher's rows are not its own:\n%s", x.name, x.logs)
		}
	}
}

// auditSQL records every row written to the queue's tables, with the
// writer's application_name ("pepsi dispatch queue pid N on HOST" for a
// dispatcher's pool, "pepsi dispatch pid N on HOST" for its listener); a
// row of pepsi.state is recorded under its partition's name (state_live,
// state_failed, state_done_…). The transaction that wrote it
// started at xact.
const auditSQL = `
CREATE TABLE test_writes (at timestamptz NOT NULL DEFAULT clock_timestamp(), xact timestamptz NOT NULL DEFAULT now(),
                          app text, tbl text, op text);
CREATE FUNCTION test_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_writes (app, tbl, op) VALUES (current_setting('application_name'), TG_TABLE_NAME, TG_OP);
    RETURN NULL;
END $$;
CREATE TRIGGER test_audit AFTER INSERT OR UPDATE OR DELETE ON pepsi.state FOR EACH ROW EXECUTE FUNCTION test_audit();
CREATE TRIGGER test_audit AFTER INSERT OR UPDATE OR DELETE ON pepsi.message FOR EACH ROW EXECUTE FUNCTION test_audit();
CREATE TRIGGER test_audit AFTER INSERT OR UPDATE OR DELETE ON pepsi.wake FOR EACH ROW EXECUTE FUNCTION test_audit();
CREATE TRIGGER test_audit AFTER INSERT OR UPDATE OR DELETE ON pepsi.settings FOR EACH ROW EXECUTE FUNCTION test_audit();`

// TestDispatchStageSetFrozen: split brain. The enrich dispatcher is frozen
// (SIGSTOP) under load with its standby waiting; its lock session is ended
// while it is frozen, and the standby takes enrich over and works. Then the
// frozen one is continued: it must write nothing more to the queue (the
// fence) and exit 1 saying it lost its lock; every message still passes
// every stage.
func TestDispatchStageSetFrozen(t *testing.T) {
	f := newSetsDB(t)
	if _, err := f.DB.Pool.Exec(context.Background(), auditSQL); err != nil {
		t.Fatal(err)
	}
	p, e, d := startSet(t, "parse"), startSet(t, "enrich"), startSet(t, "deliver")
	s := startDispatch(t, "enrich standby", "--stages", "enrich", "--standby")
	s.waitLog("standby: waiting for the dispatcher lock", 1)

	const total = 1000
	f.enqueue(total, pipeline("4ms"))
	testkit.Wait(t, "a fifth done", time.Minute, func() bool { return f.Count("done") >= total/5 }, e.logs)
	epid := e.cmd.Process.Pid
	mine := fmt.Sprintf("%% pid %d on %%", epid) // its sessions' application_name
	e.signal(syscall.SIGSTOP)
	// Frozen: once every statement it sent has ended, it can send no more.
	// Stopped in the middle of a transaction (idle in transaction, the
	// rest never sent), it holds its fence's locks, which a standby waits
	// for: the server ends such a transaction after 10 s (the fence sets
	// idle_in_transaction_session_timeout), and nothing of it commits.
	testkit.Wait(t, "the frozen dispatcher's sessions idle", time.Minute, func() bool {
		return f.Int64("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 AND state NOT IN ('idle', 'idle in transaction')", mine) == 0
	}, sessionsOf{f, mine})
	testkit.Wait(t, "the frozen dispatcher's fence locks given up", time.Minute, func() bool {
		return f.Int64(`SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.application_name LIKE $1 AND `+testkit.FenceLock, mine) == 0
	}, sessionsOf{f, mine})
	var frozenAt time.Time
	if err := f.DB.Pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&frozenAt); err != nil {
		t.Fatal(err)
	}
	inflight := make(map[int64]bool)
	for _, id := range f.IDs("SELECT id FROM pepsi.state WHERE status = 'running' AND coalesce(handed, stage) = 'enrich'") {
		inflight[id] = true
	}
	if n := f.Int64("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE $1",
		fmt.Sprintf("pepsi dispatch pid %d on %%", epid)); n != 1 {
		t.Fatalf("terminated %d lock sessions of the frozen dispatcher, want 1", n)
	}
	s.waitLog("dispatcher started", 1)
	spid := s.cmd.Process.Pid
	testkit.Wait(t, "the standby working", time.Minute, func() bool {
		return f.Int64("SELECT count(*) FROM test_writes WHERE app LIKE $1 AND tbl LIKE 'state%'", fmt.Sprintf("%% pid %d on %%", spid)) > 0
	}, s.logs)
	if f.Count("done") == total {
		t.Fatal("everything finished before the takeover: the test proves nothing")
	}

	if err := e.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, e); code != 1 || !strings.Contains(e.logs.String(), "lost the dispatcher lock to another dispatcher") {
		t.Errorf("the continued dispatcher: exit %d, want 1 saying it lost its lock; log:\n%s", code, e.logs)
	}
	f.WaitSettled(setsWait, p.logs, s.logs, d.logs)
	for _, x := range []*daemon{p, s, d} {
		if code := x.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: SIGTERM: exit %d, want 0", x.name, code)
		}
	}
	// A transaction of the frozen one's may have started after frozenAt:
	// one it sent just before it froze, which its server process had not
	// yet read when its session looked idle. Passing the fence, it ended
	// before the standby's takeover (which waits for it) and so before the
	// standby's first write. A transaction of the frozen one's that starts
	// after that one is what the fence must stop.
	var n int64
	var tbl, op *string
	var firstTaken *time.Time
	if err := f.DB.Pool.QueryRow(context.Background(), `
		WITH taken AS (SELECT min(xact) AS at FROM test_writes WHERE app LIKE $3)
		SELECT count(*), min(tbl), min(op), (SELECT at FROM taken) FROM test_writes
		 WHERE app LIKE $1 AND at > $2 AND xact >= (SELECT at FROM taken)`,
		mine, frozenAt, fmt.Sprintf("%% pid %d on %%", spid)).Scan(&n, &tbl, &op, &firstTaken); err != nil || firstTaken == nil {
		t.Fatalf("the standby's first write: %v, %v", firstTaken, err)
	}
	if n != 0 {
		t.Errorf("the dispatcher that lost its lock wrote %d rows after the takeover (%s %s, ...; the standby's first write at %v)",
			n, *op, *tbl, firstTaken.Format(time.RFC3339Nano))
	}
	var early int64
	if err := f.DB.Pool.QueryRow(context.Background(), "SELECT count(*) FROM test_writes WHERE app LIKE $1 AND at > $2",
		mine, frozenAt).Scan(&early); err != nil {
		t.Fatal(err)
	}
	if early > 0 {
		t.Logf("the frozen dispatcher wrote %d rows in a transaction it sent before it froze", early)
	}
	t.Logf("%d messages; frozen with %d of its rows running; no write from it after it lost its lock",
		total, len(inflight))
	f.checkEnd(inflight, testkit.RowsOnly)
	if n := f.Count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
}

// metricsAddr waits for d's "serving metrics" line and returns its address.
func metricsAddr(t *testing.T, d *daemon) string {
	t.Helper()
	re := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)
	var addr string
	testkit.Wait(t, d.name+" serving metrics", time.Minute, func() bool {
		if m := re.FindStringSubmatch(d.logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, d.logs)
	return "http://" + addr
}

// TestDispatchStageSetMetrics: a set's dispatcher reports its own stages
// only, in pepsi_queue_depth and the pool series; /healthz is 200 while it
// owns its whole set, 503 for a standby that waits for it.
func TestDispatchStageSetMetrics(t *testing.T) {
	f := newSetsDB(t)
	conf := f.Path + ".metrics"
	src, err := os.ReadFile(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	src = []byte(strings.Replace(string(src), "[pepsi-dispatch]\n", "[pepsi-dispatch]\nMETRICS_LISTEN = 127.0.0.1:0\n", 1))
	if err := os.WriteFile(conf, src, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PEPSI_CONFIG", conf)
	f.Enqueue("deliver", []byte("@sleep=1h"))
	e := startSet(t, "parse,enrich")
	s := startDispatch(t, "standby", "--stages", "enrich", "--standby")
	s.waitLog("standby: waiting for the dispatcher lock", 1)

	base := metricsAddr(t, e)
	if code, _ := testkit.Get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz of the set's owner: %d, want 200", code)
	}
	if code, _ := testkit.Get(t, metricsAddr(t, s)+"/healthz"); code != 503 {
		t.Errorf("/healthz of a waiting standby: %d, want 503", code)
	}
	_, body := testkit.Get(t, base+"/metrics")
	for _, want := range []string{`pepsi_queue_depth{stage="parse",status="pending"}`, `pepsi_queue_depth{stage="enrich",status="pending"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `stage="deliver"`) {
		t.Errorf("/metrics of the parse,enrich dispatcher carries deliver:\n%s", grepLines(body, `stage="deliver"`))
	}
	for _, x := range []*daemon{s, e} {
		if code := x.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: SIGTERM: exit %d, want 0", x.name, code)
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDispatchOneProcessor: pepsi dispatch runs its goroutines on one
// processor, unless GOMAXPROCS says otherwise, and says so as it starts.
func TestDispatchOneProcessor(t *testing.T) {
	newSetsDB(t)
	for _, tc := range []struct{ env, want string }{{"", "procs=1"}, {"2", "procs=2"}} {
		t.Setenv("GOMAXPROCS", tc.env)
		d := startDispatch(t, "dispatcher, GOMAXPROCS="+tc.env)
		d.waitLog("dispatcher started", 1)
		if line := regexp.MustCompile(`msg="dispatcher started".*`).FindString(d.logs.String()); !strings.Contains(line+" ", " "+tc.want+" ") {
			t.Errorf("GOMAXPROCS=%q: want %s in %q", tc.env, tc.want, line)
		}
		if code := d.signal(syscall.SIGTERM); code != 0 {
			t.Fatalf("GOMAXPROCS=%q: exit status %d after SIGTERM; log:\n%s", tc.env, code, d.logs)
		}
	}
}

// sessionsOf lists, for a failure message, the sessions whose
// application_name is like app that are not idle: state, wait and query.
type sessionsOf struct {
	f   *faultDB
	app string
}

func (x sessionsOf) String() string {
	rows, err := x.f.DB.Pool.Query(context.Background(), `SELECT format('%s %s:%s %s', state, wait_event_type, wait_event, left(query, 300))
		FROM pg_stat_activity WHERE application_name LIKE $1 AND state <> 'idle'`, x.app)
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "\n")
}
