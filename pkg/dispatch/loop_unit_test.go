package dispatch

// Database-free tests of the loop's pure parts: a change to how capacity,
// statistics, deadlines or a job's result are worked out fails here in
// milliseconds. The dispatcher is made with New and never run; its
// workers are fakes whose feed is a channel the test reads.

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// unitConf is a two-stage configuration for the database-free tests.
const unitConf = `[database]
DSN = postgres:///nowhere

[pepsi-dispatch]
STATS_INTERVAL = 10
ORPHAN_SWEEP = 60
RETENTION = 0
MAX_RUNTIME = 30
WORKER_IDLE_TIMEOUT = 120
SHUTDOWN_GRACE = 4
RECONNECT_MIN = 1
RECONNECT_MAX = 8

[stage-a]
PROGRAM = /bin/true
PARALLELISM = 2
QUEUE_LIMIT = 4

[stage-b]
PROGRAM = /bin/true
PARALLELISM = 1
QUEUE_LIMIT = 2
MAX_MESSAGES = 3
`

// unit is a dispatcher that is never run, its clock and its log.
type unit struct {
	*Dispatcher
	t   *testing.T
	at  time.Time
	log *testkit.Buffer
}

func newUnit(t *testing.T) *unit {
	t.Helper()
	return newUnitConf(t, unitConf)
}

// newUnitConf is newUnit with another configuration.
func newUnitConf(t *testing.T, conf string) *unit {
	t.Helper()
	cfg, err := config.Parse("unit.conf", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	u := &unit{t: t, at: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), log: &testkit.Buffer{}}
	d, err := New(Options{Config: cfg, Log: slog.New(slog.NewTextHandler(u.log, nil)), Now: func() time.Time { return u.at }})
	if err != nil {
		t.Fatal(err)
	}
	u.Dispatcher = d
	u.lastFlush, u.nextOrphans = u.at, u.at.Add(time.Minute)
	u.workerDue = u.at.Add(time.Hour) // as watch leaves it with no worker
	return u
}

// worker adds a fake worker to stage's pool, holding the ids given.
func (u *unit) worker(stage string, ids ...int64) *worker {
	p := u.byName[stage]
	u.seq++
	// pid 0: signal sends nothing (a real pid's group would get it).
	w := &worker{seq: u.seq, pool: p, proc: &process{feed: make(chan []byte, 16)}, idleAt: u.at}
	for _, id := range ids {
		w.hand(pass{id: id}, u.at)
	}
	w.buf = nil
	p.workers = append(p.workers, w)
	return w
}

// sent returns the job the loop handed to l; the test fails if there is none.
func (u *unit) sent(l *lane) *job {
	u.t.Helper()
	select {
	case j := <-l.jobs:
		return j
	default:
		u.t.Fatal("no job was started")
		return nil
	}
}

// sentChore returns the chore the loop handed to the chore lane; the test
// fails if there is none.
func (u *unit) sentChore() chore {
	u.t.Helper()
	select {
	case c := <-u.chores.jobs:
		return c
	default:
		u.t.Fatal("no chore was started")
		return nil
	}
}

// fed returns what w was written since the last call.
func fed(w *worker) string {
	var b strings.Builder
	for {
		select {
		case buf := <-w.proc.feed:
			b.Write(buf)
		default:
			return b.String()
		}
	}
}

func TestPoolCapacity(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(u *unit)
		stage string
		want  int
	}{
		{"no workers: every worker it may start", func(*unit) {}, "a", 8},
		{"MAX_MESSAGES caps a worker yet to start", func(*unit) {}, "b", 2},
		{"one worker with one in flight", func(u *unit) { u.worker("a", 1) }, "a", 3 + 4},
		{"both workers full", func(u *unit) { u.worker("a", 1, 2, 3, 4); u.worker("a", 5, 6, 7, 8) }, "a", 0},
		{"a stopping worker frees its slot", func(u *unit) {
			u.worker("a", 1).stopping = true
			u.worker("a", 2, 3)
		}, "a", 2 + 4},
		{"a draining worker takes nothing", func(u *unit) { u.worker("a").draining = true }, "a", 4},
		{"MAX_MESSAGES left bounds a worker", func(u *unit) {
			w := u.worker("b", 1)
			w.handed = 2 // one more in its life, one slot free
		}, "b", 1},
		{"cooling down", func(u *unit) { u.byName["a"].coolUntil = u.at.Add(time.Second) }, "a", 0},
	} {
		u := newUnit(t)
		c.setup(u)
		if got := u.byName[c.stage].capacity(u.at); got != c.want {
			t.Errorf("%s: capacity %d, want %d", c.name, got, c.want)
		}
	}
}

func TestTallySettled(t *testing.T) {
	for _, c := range []struct {
		name string
		out  queue.Outcome
		want queue.DispatchStats
	}{
		{"advanced: requeued", queue.OutRequeued, queue.DispatchStats{Requeued: 1}},
		{"not run: reset", queue.OutReset, queue.DispatchStats{Reset: 1}},
		{"failed", queue.OutFailed, queue.DispatchStats{Failed: 1}},
		{"paused", queue.OutPaused, queue.DispatchStats{Paused: 1}},
		{"done", queue.OutDone, queue.DispatchStats{Done: 1}},
		{"cancelled", queue.OutCancelled, queue.DispatchStats{Cancelled: 1}},
		{"nothing to book", 0, queue.DispatchStats{}},
	} {
		var tl tally
		tl.settled(&queue.Settled{ID: 1, Outcome: c.out})
		if tl.global != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, tl.global, c.want)
		}
	}
}

func TestTallyFlushes(t *testing.T) {
	tl := tally{token: 7}
	tl.answered("a", true, 2*time.Second, nil)
	tl.answered("a", false, time.Second, nil)
	tl.global.Claimed = 2
	fs := tl.flushes(nil)
	if tl.dirty || !tl.global.IsZero() || len(fs) != 1 || fs[0].Token != 7 || fs[0].Seq != 1 ||
		len(fs[0].Stages) != 1 || fs[0].Stages[0].Processed != 1 || fs[0].Stages[0].Failed != 1 || fs[0].Global.Claimed != 2 {
		t.Fatalf("flushes: %+v, left %+v", fs, tl)
	}
	if tl.pending() {
		t.Fatal("pending after the deltas were taken")
	}
	// The write failed (maybe after its commit): sent again as it was,
	// with what was counted meanwhile as a write of its own.
	tl.flushed(fs, false)
	tl.answered("a", true, time.Second, nil)
	again := tl.flushes(nil)
	if len(again) != 2 || again[0].Seq != 1 || again[0].Stages[0].Processed != 1 || again[1].Seq != 2 || again[1].Stages[0].Processed != 1 {
		t.Fatalf("after a failed write: %+v", again)
	}
	tl.flushed(again, true)
	if tl.pending() || len(tl.flushes(nil)) != 0 {
		t.Fatalf("after a good write: %+v", tl)
	}
}

func TestNextDeadline(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(u *unit)
		want  time.Duration // from now
	}{
		{"nothing to do: the statistics interval", func(*unit) {}, 10 * time.Second},
		{"verdicts and an idle settle lane: now", func(u *unit) {
			u.plan.settles = append(u.plan.settles, queue.Settle{ID: 1})
		}, 0},
		{"verdicts while a settle runs: its result wakes the loop", func(u *unit) {
			u.plan.settles = append(u.plan.settles, queue.Settle{ID: 1})
			u.settler.job, u.plan.settleRunning = &u.settler.buf, true
		}, 10 * time.Second},
		{"after a database error: the retry", func(u *unit) {
			u.retryAt = u.at.Add(3 * time.Second)
			u.plan.settles = append(u.plan.settles, queue.Settle{ID: 1})
		}, 3 * time.Second},
		{"a poll due", func(u *unit) { u.plan.waker.pollAt = u.at.Add(time.Millisecond) }, time.Millisecond},
		{"a poll, while a claim runs: its result", func(u *unit) {
			u.plan.waker.pollAt = u.at.Add(time.Millisecond)
			u.claimer.job, u.plan.claimRunning = &u.claimer.buf, true
		}, 10 * time.Second},
		{"without the lock: no claim", func(u *unit) {
			u.lockless = true
			u.plan.waker.pollAt = u.at.Add(time.Millisecond)
		}, 10 * time.Second},
		{"statistics to write while idle", func(u *unit) {
			u.tally.dirty = true
			u.lastFlush = u.at.Add(-300 * time.Millisecond)
		}, 700 * time.Millisecond},
		{"statistics to write while a chore runs: its result", func(u *unit) {
			u.tally.dirty = true
			u.lastFlush = u.at.Add(-300 * time.Millisecond)
			u.chores.job = &statsWrite{}
		}, 10 * time.Second},
		{"the orphan sweep after a reconnect", func(u *unit) { u.orphansNow = true }, 0},
		{"the orphan sweep waits for the claim", func(u *unit) {
			u.orphansNow = true
			u.claimer.job, u.plan.claimRunning = &u.claimer.buf, true
		}, 10 * time.Second},
		{"a worker's MAX_RUNTIME", func(u *unit) { u.workerDue = u.at.Add(2 * time.Second) }, 2 * time.Second},
		{"stopping: give up at stopBy", func(u *unit) {
			u.worker("a", 1)
			u.beginStop()
			u.workerDue = u.at.Add(time.Hour) // the kill is at SHUTDOWN_GRACE, before stopBy
		}, 4*time.Second + stopSlack},
		{"a paused row falls due", func(u *unit) { u.plan.nextPaused = u.at.Add(5 * time.Second) }, 5 * time.Second},
		// A due deadline of the claim's while the claim may not start
		// spun the loop (the settle lane behind under 64 workers: the
		// dispatcher took 3x its CPU per pass and halved the throughput).
		{"a poll past due while the settles are behind: the settle's result", func(u *unit) {
			u.plan.waker.pollAt = u.at.Add(-time.Millisecond)
			u.settler.job, u.plan.settleRunning = &u.settler.buf, true
			for i := range u.plan.backlog + 1 {
				u.plan.settles = append(u.plan.settles, queue.Settle{ID: int64(i + 1)})
			}
		}, 10 * time.Second},
		{"a poll past due while the orphan sweep runs: the sweep's result", func(u *unit) {
			u.plan.waker.pollAt = u.at.Add(-time.Millisecond)
			u.chores.job = &orphanSweep{}
		}, 10 * time.Second},
		{"a paused row past due while stopping: stopBy", func(u *unit) {
			u.worker("a", 1)
			u.beginStop()
			u.workerDue = u.at.Add(time.Hour)
			u.plan.nextPaused = u.at.Add(-time.Second)
		}, 4*time.Second + stopSlack},
	} {
		u := newUnit(t)
		c.setup(u)
		if got := u.nextDeadline(u.at).Sub(u.at); got != c.want {
			t.Errorf("%s: next deadline in %s, want %s", c.name, got, c.want)
		}
	}
}

// claimed is a claim job's result for the unit's dispatcher: caps asked
// and ids got per stage.
func (u *unit) claimJob(caps map[string]int, got map[string][]int64) *job {
	j := &u.claimer.buf
	j.turn = queue.Turn{}
	j.res = queue.TurnResult{}
	for _, p := range u.pools {
		if c, ok := caps[p.cfg.Name]; ok {
			j.turn.Caps = append(j.turn.Caps, queue.StageCap{Stage: p.cfg.Name, Cap: c})
		}
	}
	for stage, ids := range got {
		for _, id := range ids {
			j.res.Claimed = append(j.res.Claimed, queue.Claimed{ID: id, Stage: stage})
		}
	}
	u.plan.claimRunning, u.plan.claimGen, u.plan.claimMarks, u.plan.caps = true, u.plan.wakeGen, u.plan.marks, j.turn.Caps
	u.claimer.job = j
	return j
}

func TestFinishClaimMore(t *testing.T) {
	u := newUnit(t)
	u.worker("a")
	u.worker("b")
	// a filled its cap: it may have more; b did not.
	u.finishJob(u.claimJob(map[string]int{"a": 2, "b": 2}, map[string][]int64{"a": {1, 2}, "b": {3}}), u.at)
	if !u.plan.byName["a"].more || u.plan.byName["b"].more {
		t.Errorf("more: a %v b %v, want a only", u.plan.byName["a"].more, u.plan.byName["b"].more)
	}
	// A settle made rows pending at b while the next claim ran.
	j := u.claimJob(map[string]int{"b": 1}, nil)
	u.plan.markMore(u.plan.byName["b"])
	u.finishJob(j, u.at)
	if !u.plan.byName["b"].more {
		t.Error("a settle's pending rows during the claim were forgotten")
	}
	// A wake during the claim keeps every stage claimed for worth another.
	j = u.claimJob(map[string]int{"b": 1}, nil)
	u.woken()
	u.finishJob(j, u.at)
	if !u.plan.byName["b"].more {
		t.Error("a wake during the claim was forgotten")
	}
	u.finishJob(u.claimJob(map[string]int{"b": 1}, nil), u.at)
	if u.plan.byName["b"].more {
		t.Error("an empty claim left b worth another")
	}
	if u.tally.global.Claimed != 3 {
		t.Errorf("claimed %d, want 3", u.tally.global.Claimed)
	}
}

func TestFinishClaimHandOut(t *testing.T) {
	u := newUnit(t)
	wa := u.worker("a")
	wb := u.worker("b")
	u.finishJob(u.claimJob(map[string]int{"a": 4, "b": 2}, map[string][]int64{"a": {12, 10, 11}, "b": {20}, "gone": {30}}), u.at)
	if got := fed(wa); got != "10\n11\n12\n" {
		t.Errorf("a was fed %q, want ids in order", got)
	}
	if got := fed(wb); got != "20\n" {
		t.Errorf("b was fed %q", got)
	}
	// A stage no pool has (changed by hand while the claim ran) goes back.
	if len(u.plan.settles) != 1 || u.plan.settles[0].ID != 30 || u.plan.settles[0].Verdict != queue.NotRun {
		t.Errorf("settles %+v, want 30 not run", u.plan.settles)
	}
	if u.workerDue != u.at.Add(u.cfg.Dispatch.MaxRuntime) {
		t.Errorf("worker deadline %s, want MAX_RUNTIME from now", u.workerDue.Sub(u.at))
	}

	// Claimed as a stop began: not handed out.
	u.plan.settles = u.plan.settles[:0]
	u.stopping = true
	u.finishJob(u.claimJob(map[string]int{"a": 1}, map[string][]int64{"a": {13}}), u.at)
	if got := fed(wa); got != "" || len(u.plan.settles) != 1 || u.plan.settles[0].Verdict != queue.NotRun {
		t.Errorf("while stopping: fed %q, settles %+v", got, u.plan.settles)
	}
}

func TestFinishClaimFailed(t *testing.T) {
	u := newUnit(t)
	u.plan.waker.start(u.at) // the first turn writes the flag off
	u.plan.checkPause = true
	u.startClaim(u.at) // not sent: the lane is not running, but its channel holds one
	j := u.claimer.job
	if j == nil || !j.turn.Resume || j.turn.Arm != queue.ArmOff || u.plan.checkPause {
		t.Fatalf("claim not started as expected: %+v", j)
	}
	u.sent(&u.claimer)
	j.err = errors.New("connection refused")
	u.finishJob(j, u.at)
	if !u.plan.checkPause || u.plan.waker.write != queue.ArmOff {
		t.Errorf("a failed claim lost its resume (%v) or its flag write (%v)", u.plan.checkPause, u.plan.waker.write)
	}
	if !u.retryAt.After(u.at) || u.retryAt.After(u.at.Add(u.cfg.Dispatch.ReconnectMin)) {
		t.Errorf("retry in %s, want within RECONNECT_MIN", u.retryAt.Sub(u.at))
	}
	if !strings.Contains(u.log.String(), "database: claim failed; retrying") {
		t.Errorf("log: %s", u.log)
	}
}

// retryCounter counts QueueRetry calls.
type retryCounter struct {
	nopObserver
	n int
}

func (r *retryCounter) QueueRetry(string) { r.n++ }

// A statement the fence refuses (the lock session died under it) backs off
// like any failure, but is the listener's reconnect, not a queue retry.
func TestDBFailedFenced(t *testing.T) {
	u := newUnit(t)
	obs := &retryCounter{}
	u.obs = obs
	u.dbFailed(u.at, "settle", &pgconn.PgError{Code: "55P03", Message: "pepsi: the lock session is gone"})
	if obs.n != 0 || !u.retryAt.After(u.at) {
		t.Errorf("fenced: %d queue retries, retry at %s; want 0 and a backoff", obs.n, u.retryAt.Sub(u.at))
	}
	if !strings.Contains(u.log.String(), "database: settle refused: the lock session is gone") {
		t.Errorf("log: %s", u.log)
	}
	u.dbFailed(u.at, "settle", errors.New("connection refused"))
	if obs.n != 1 {
		t.Errorf("a network failure: %d queue retries, want 1", obs.n)
	}
}

func TestFinishSettle(t *testing.T) {
	u := newUnit(t)
	u.plan.settles = []queue.Settle{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}}
	u.startSettle(u.at)
	j := u.sent(&u.settler)
	due := u.at.Add(time.Minute)
	j.res.Settled = []queue.Settled{
		{ID: 1, Before: queue.Running, After: queue.Pending, Stage: "b", Handed: "a", Outcome: queue.OutRequeued},
		{ID: 2, Before: queue.Running, After: queue.Paused, Stage: "a", Handed: "a", Timeout: due, Outcome: queue.OutPaused},
		{ID: 3, Before: queue.Running, After: queue.Pending, Stage: "nowhere", Handed: "a", Outcome: queue.OutRequeued},
		{ID: 4, Before: queue.Running, After: queue.Pending, Stage: "nowhere", Handed: "b", Outcome: queue.OutRequeued},
	}
	u.plan.byName["b"].more = false
	u.finishJob(j, u.at)
	if !u.plan.byName["b"].more || u.plan.byName["b"].marked == 0 {
		t.Error("b got a pending row and is not worth a claim")
	}
	if !u.plan.nextPaused.Equal(due) {
		t.Errorf("next paused %s, want %s", u.plan.nextPaused, due)
	}
	if n := strings.Count(u.log.String(), "moved to a stage no [stage-NAME] section configures"); n != 1 {
		t.Errorf("%d warnings for the unconfigured stage, want 1:\n%s", n, u.log)
	}
	if u.tally.global.Requeued != 3 || u.tally.global.Paused != 1 {
		t.Errorf("tally %+v", u.tally.global)
	}

	// A failed settle keeps its verdicts, ahead of the newer ones.
	u.plan.settles = []queue.Settle{{ID: 5}}
	u.startSettle(u.at)
	j = u.sent(&u.settler)
	u.plan.settles = append(u.plan.settles, queue.Settle{ID: 6})
	j.err = errors.New("timeout")
	u.finishJob(j, u.at)
	if len(u.plan.settles) != 2 || u.plan.settles[0].ID != 5 || u.plan.settles[1].ID != 6 {
		t.Errorf("after a failed settle: %+v", u.plan.settles)
	}
	// It may have committed: no claim goes before it goes again.
	if held, _ := u.plan.claimGate(u.at, u.loopState()); !held {
		t.Error("a claim may start while a failed settle waits to go again")
	}
	u.retryAt = u.at
	u.startSettle(u.at)
	j = u.sent(&u.settler)
	j.res.Settled = nil
	u.finishJob(j, u.at)
	if held, _ := u.plan.claimGate(u.at, u.loopState()); held {
		t.Error("claims still held after the settle went through")
	}
}

func TestFinishChore(t *testing.T) {
	u := newUnit(t)
	u.tally.answered("a", true, time.Second, nil)
	u.orphansNow = true
	u.lastFlush = u.at.Add(-time.Minute)
	u.startChore(u.at)
	sw, ok := u.sentChore().(*orphanSweep)
	if !ok || sw.age != 0 {
		t.Fatalf("first chore %#v, want an orphan sweep of any age", sw)
	}
	if u.startClaim(u.at); u.claimer.job != nil {
		t.Fatal("a claim started during the orphan sweep")
	}
	if u.startChore(u.at); len(u.chores.jobs) != 0 {
		t.Fatal("a second chore started beside the first")
	}
	sw.reset = 2
	u.finishChore(choreResult{c: sw}, u.at)
	if u.orphansNow || u.tally.global.Orphans != 2 || !u.nextOrphans.After(u.at) {
		t.Errorf("after the sweep: orphansNow %v, orphans %d, next in %s", u.orphansNow, u.tally.global.Orphans, u.nextOrphans.Sub(u.at))
	}
	// The write that follows takes the deltas; it fails: it is kept, to be
	// sent again as it was.
	u.startChore(u.at)
	w, ok := u.sentChore().(*statsWrite)
	if !ok || u.tally.dirty || len(w.flushes) != 1 || w.flushes[0].Global.Orphans != 2 || w.flushes[0].Stages[0].Processed != 1 {
		t.Fatalf("second chore %#v, tally dirty %v", w, u.tally.dirty)
	}
	u.finishChore(choreResult{c: w, err: errors.New("lock timeout")}, u.at)
	if !u.tally.pending() || len(u.tally.unflushed) != 1 || u.tally.unflushed[0].Stages[0].Processed != 1 {
		t.Errorf("after the failed write: unflushed %+v", u.tally.unflushed)
	}
	if !strings.Contains(u.log.String(), "database: writing statistics failed") || !u.retryAt.After(u.at) {
		t.Errorf("no retry of the write: %s", u.log)
	}
}

func TestStopWrapUp(t *testing.T) {
	u := newUnit(t)
	w := u.worker("a", 1)
	u.beginStop()
	if !w.stopping || u.stopped(u.at) {
		t.Fatal("stopped with a worker running")
	}
	u.exited(w, nil)
	if u.stopped(u.at) || u.readyToWrapUp() {
		t.Fatal("wrapping up with a verdict unsettled")
	}
	u.startJobs(u.at)
	j := u.sent(&u.settler)
	if u.readyToWrapUp() {
		t.Fatal("wrapping up while a settle runs")
	}
	u.finishJob(j, u.at)
	// The janitor's services stop first: a retention batch in flight ends,
	// and what it deleted is written with the rest.
	u.maintaining = true
	u.tally.dirty = true
	if u.startJobs(u.at); u.chores.job != nil {
		t.Fatal("wrapping up while the services run")
	}
	u.reported(serviceReport{expired: 3})
	u.reported(serviceReport{over: true})
	u.startJobs(u.at)
	sw, ok := u.sentChore().(*statsWrite)
	if !ok || sw.flushes[0].Global.Expired != 3 {
		t.Fatalf("first last chore %#v, want the statistics with the services' count", sw)
	}
	u.finishChore(choreResult{c: sw}, u.at)
	u.startJobs(u.at)
	if _, ok := u.sentChore().(*disarm); !ok {
		t.Fatal("no disarm after the statistics")
	}
	if u.stopped(u.at) {
		t.Fatal("stopped before the last chore")
	}
	u.finishChore(choreResult{c: u.chores.job}, u.at)
	u.startJobs(u.at)
	if !u.stopped(u.at) {
		t.Fatal("not stopped after the last chore")
	}

	// A database that never answers: given up on at stopBy.
	u = newUnit(t)
	u.plan.settles = []queue.Settle{{ID: 1}}
	u.beginStop()
	u.startJobs(u.at)
	if u.stopped(u.stopBy.Add(-time.Millisecond)) || !u.stopped(u.stopBy) {
		t.Error("not given up on exactly at stopBy")
	}
	if u.result(nil); !strings.Contains(u.log.String(), "giving up: the database did not answer in time") {
		t.Errorf("log: %s", u.log)
	}
}

// A stage with KEY books the keys of what it claims, passes them to the
// next claim, and gives them back with the settle.
func TestKeysHeld(t *testing.T) {
	u := newUnitConf(t, strings.Replace(unitConf, "QUEUE_LIMIT = 4\n", "QUEUE_LIMIT = 4\nKEY = header:customer\nKEY_LIMIT = 2\n", 1))
	p := u.byName["a"]
	if p.plan.keys == nil || p.cfg.KeyLimit != 2 || u.plan.byName["b"].keys != nil {
		t.Fatalf("keys: a %+v, b %+v", p.plan.keys, u.plan.byName["b"].keys)
	}
	u.plan.waker.start(u.at)
	claimed := []queue.Claimed{
		{ID: 1, Stage: "a", Key: "x", Keyed: true}, {ID: 2, Stage: "a", Key: "x", Keyed: true},
		{ID: 3, Stage: "a"}, {ID: 4, Stage: "b", Key: "x", Keyed: true},
	}
	u.plan.holdClaimed(claimed) // as the claim's result does
	u.handOut(claimed, u.at)
	u.plan.holdClaimed([]queue.Claimed{{ID: 1, Stage: "a", Key: "x", Keyed: true}}) // again: no double count
	if p.plan.keys.held["x"] != 2 || len(p.plan.keys.of) != 2 {
		t.Fatalf("held %v of %v, want x twice", p.plan.keys.held, p.plan.keys.of)
	}
	u.startClaim(u.at)
	if j := u.claimer.job; j == nil {
		t.Fatal("no claim started")
	} else {
		for _, c := range j.turn.Caps {
			if c.Stage == "a" && (c.KeyLimit != 2 || len(c.Held) != 1 || c.Held[0] != (queue.HeldKey{Key: "x", N: 2})) {
				t.Errorf("claim cap for a: %+v", c)
			}
			if c.Stage == "b" && (c.KeyLimit != 0 || c.Held != nil) {
				t.Errorf("claim cap for b: %+v", c)
			}
		}
	}
	p.plan.more = false
	u.plan.releaseSettled([]queue.Settled{{ID: 1, Handed: "a"}, {ID: 3, Handed: "a"}, {ID: 4, Handed: "b"}})
	if p.plan.keys.held["x"] != 1 || !p.plan.more {
		t.Errorf("after a settle: held %v, more %v; want x once and a claim due", p.plan.keys.held, p.plan.more)
	}
	u.plan.releaseSettled([]queue.Settled{{ID: 2, Handed: "a"}})
	if len(p.plan.keys.held) != 0 || len(p.plan.keys.of) != 0 {
		t.Errorf("all settled: held %v of %v", p.plan.keys.held, p.plan.keys.of)
	}
}

// TestSettleWaits: a settle of fewer than settleWorth verdicts waits up
// to settleDelay while answers are still to come, and the loop's deadline
// is its end; enough verdicts, or no worker with messages in flight, and
// it goes at once.
func TestSettleWaits(t *testing.T) {
	u := newUnit(t)
	u.worker("a", 10, 11)
	u.plan.settles = []queue.Settle{{ID: 1}, {ID: 2}}
	u.startSettle(u.at)
	if u.settler.job != nil {
		t.Fatal("a small settle went at once while answers are due")
	}
	if got := u.nextDeadline(u.at); !got.Equal(u.at.Add(settleDelay)) {
		t.Fatalf("next deadline in %v, want the settle's %v", got.Sub(u.at), settleDelay)
	}
	u.startSettle(u.at.Add(settleDelay / 2))
	if u.settler.job != nil {
		t.Fatal("the small settle went before its delay ended")
	}
	u.startSettle(u.at.Add(settleDelay))
	if j := u.sent(&u.settler); len(j.turn.Settles) != 2 {
		t.Fatalf("settled %d verdicts, want 2", len(j.turn.Settles))
	}
	u.finishJob(u.settler.job, u.at)

	// Enough for a batch: at once.
	for i := range settleWorth {
		u.plan.settles = append(u.plan.settles, queue.Settle{ID: int64(100 + i)})
	}
	u.startSettle(u.at)
	if j := u.sent(&u.settler); len(j.turn.Settles) != settleWorth {
		t.Fatalf("settled %d verdicts, want %d", len(j.turn.Settles), settleWorth)
	}
}

// TestSettleKeyed: answers of a stage with KEY are settled at once, since
// their keys are held until the settle; a stage without KEY waits.
func TestSettleKeyed(t *testing.T) {
	u := newUnitConf(t, strings.Replace(unitConf, "QUEUE_LIMIT = 4\n", "QUEUE_LIMIT = 4\nKEY = header:customer\nKEY_LIMIT = 1\n", 1))
	if u.plan.byName["a"].keys == nil || u.plan.byName["b"].keys != nil {
		t.Fatal("want a keyed, b not")
	}
	wb := u.worker("b", 20, 21, 22)
	u.answers(wb, []protocol.Status{{}})
	u.startSettle(u.at)
	if u.settler.job != nil {
		t.Fatal("an unkeyed stage's answer was settled at once while answers are due")
	}
	wa := u.worker("a", 10, 11, 12)
	u.answers(wa, []protocol.Status{{}})
	u.startSettle(u.at)
	if j := u.sent(&u.settler); len(j.turn.Settles) != 2 {
		t.Fatalf("settled %d verdicts, want both", len(j.turn.Settles))
	}
	u.finishJob(u.settler.job, u.at)
	u.answers(wb, []protocol.Status{{}})
	u.startSettle(u.at)
	if u.settler.job != nil {
		t.Fatal("after the keyed settle, an unkeyed answer went at once")
	}
}

// TestClaimBacklog: a stage that is full while more of its messages wait
// keeps the dispatcher from arming (its answers will wake it); a full
// stage with nothing more waiting, or one held off by a cooldown, does not.
func TestClaimBacklog(t *testing.T) {
	u := newUnit(t)
	b := u.byName["b"]
	u.worker("b", 1, 2) // PARALLELISM 1, QUEUE_LIMIT 2: full
	for _, c := range []struct {
		name    string
		more    bool
		cool    time.Duration
		backlog bool
	}{
		{"full, more waiting", true, 0, true},
		{"full, nothing more", false, 0, false},
		{"full, more waiting, cooling down", true, time.Minute, false},
	} {
		b.plan.more, b.coolUntil = c.more, u.at.Add(c.cool)
		u.plan.waker.backlog = !c.backlog
		u.startClaim(u.at)
		if u.claimer.job != nil {
			j := u.sent(&u.claimer)
			j.res = queue.TurnResult{}
			u.finishJob(j, u.at)
		}
		if u.plan.waker.backlog != c.backlog {
			t.Errorf("%s: backlog %v, want %v", c.name, u.plan.waker.backlog, c.backlog)
		}
	}
}

// TestClaimStaleJudge: a claim that started before a notification does
// not judge the arm the notification ended; the next claim does.
func TestClaimStaleJudge(t *testing.T) {
	u := newUnit(t)
	u.plan.waker.mode, u.plan.waker.armAfter = wakeArmed, armAfterMin
	j := u.claimJob(map[string]int{"a": 8}, nil) // in flight as the notification comes
	u.woken()
	u.finishJob(j, u.at)
	if u.plan.waker.armAfter != armAfterMin || !u.plan.waker.judging {
		t.Fatalf("after the stale claim: armAfter %v, judging %v; want %v, still judging", u.plan.waker.armAfter, u.plan.waker.judging, armAfterMin)
	}
	u.finishJob(u.claimJob(map[string]int{"a": 8}, map[string][]int64{"a": {1}}), u.at)
	if u.plan.waker.judging || u.plan.waker.armAfter != armAfterMin {
		t.Fatalf("after the wake's own claim found one: armAfter %v, judging %v", u.plan.waker.armAfter, u.plan.waker.judging)
	}
	// Found nothing: the quiet before the next arm doubles.
	u.plan.waker.mode = wakeArmed
	u.woken()
	u.finishJob(u.claimJob(map[string]int{"a": 8}, nil), u.at)
	if u.plan.waker.armAfter != 2*armAfterMin {
		t.Fatalf("after a wake that brought nothing: armAfter %v, want %v", u.plan.waker.armAfter, 2*armAfterMin)
	}
}
