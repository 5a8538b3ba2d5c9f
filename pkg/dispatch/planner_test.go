package dispatch

// The planner's tests: no database, no processes, no dispatcher. Its
// inputs are verdicts, claim and settle results, the workers' room (fake
// slots) and the clock; its outputs are the turns it starts and the
// deadlines it sets.

import (
	"fmt"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// room is fake slots: a stage's workers' room, set by the test.
type room struct {
	n    int
	cool bool
}

func (r *room) capacity(time.Time) int     { return r.n }
func (r *room) coolingDown(time.Time) bool { return r.cool }

// yes is loopState.answersDue when answers are to come.
func yes() bool { return true }

// planFixture is a planner of two stages, a (keyed) and b, their fake
// room, and a clock.
type planFixture struct {
	*planner
	t    *testing.T
	at   time.Time
	room map[string]*room
}

func newPlan(t *testing.T) *planFixture {
	t.Helper()
	f := &planFixture{planner: newPlanner(nil, queue.AllStages), t: t,
		at: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), room: map[string]*room{}}
	for _, s := range []config.Stage{
		{Name: "a", Parallelism: 2, QueueLimit: 4, MaxMessages: 1000, KeyHeader: "customer", KeyLimit: 1},
		{Name: "b", Parallelism: 1, QueueLimit: 4, MaxMessages: 1000},
	} {
		r := &room{n: s.Parallelism * s.QueueLimit}
		f.room[s.Name] = r
		f.add(s, r)
	}
	f.start(f.at)
	return f
}

// claim asks for the next claim at the fixture's time and returns it, or
// nil when none was started.
func (f *planFixture) claim(s loopState) *queue.Turn {
	var t queue.Turn
	if !f.nextClaim(f.at, s, &t) {
		return nil
	}
	return &t
}

// settle asks for the next settle and returns it, or nil.
func (f *planFixture) settle(s loopState) *queue.Turn {
	var t queue.Turn
	if !f.nextSettle(f.at, s, &t) {
		return nil
	}
	return &t
}

// next is the planner's next deadline from now, or -1 for none.
func (f *planFixture) next(s loopState) time.Duration {
	var at time.Time
	f.deadline(f.at, s, func(t time.Time) { at = earliest(at, t) })
	if at.IsZero() {
		return -1
	}
	return at.Sub(f.at)
}

// verdicts adds n ok verdicts of stage, ids from first.
func (f *planFixture) verdicts(stage string, first int64, n int) {
	for i := range int64(n) {
		f.verdict(queue.Settle{ID: first + i, Stage: stage, Verdict: queue.PassOK})
	}
}

// capOf returns stage's cap in t, 0 when t does not claim for it.
func capOf(t *queue.Turn, stage string) int {
	for _, c := range t.Caps {
		if c.Stage == stage {
			return c.Cap
		}
	}
	return 0
}

// TestPlannerClaimGate: every reason a claim is held, each with no
// deadline of the claim's (its end wakes the loop); and every reason it
// falls due, each as the deadline.
func TestPlannerClaimGate(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(f *planFixture) loopState
	}{
		{"a claim in flight", func(f *planFixture) loopState {
			f.claimRunning = true
			return loopState{}
		}},
		{"stopping", func(*planFixture) loopState { return loopState{stopping: true} }},
		{"without the lock", func(*planFixture) loopState { return loopState{lockless: true} }},
		{"the orphan sweep runs", func(*planFixture) loopState { return loopState{sweeping: true} }},
		{"the settles behind", func(f *planFixture) loopState {
			f.verdicts("b", 1, f.backlog+1)
			f.settleRunning = true // the next settle waits for the one in flight
			return loopState{}
		}},
		{"a failed settle to go again", func(f *planFixture) loopState {
			f.settleAgain = true
			return loopState{}
		}},
	} {
		f := newPlan(t)
		s := c.setup(f)
		f.waker.pollAt = f.at.Add(-time.Millisecond) // a poll past due
		f.waker.write = queue.ArmOn                  // and a flag to write
		if held, due := f.claimGate(f.at, s); !held || !due.IsZero() {
			t.Errorf("%s: claim gate held %v, due %v; want held, no deadline", c.name, held, due)
		}
		if tt := f.claim(s); tt != nil {
			t.Errorf("%s: a claim started: %+v", c.name, tt)
		}
		if n := f.next(s); n == 0 {
			t.Errorf("%s: next deadline now: the loop would spin", c.name)
		}
	}

	for _, c := range []struct {
		name  string
		setup func(f *planFixture)
		want  time.Duration
	}{
		{"nothing due", func(f *planFixture) { f.waker.pollAt = time.Time{} }, -1},
		{"a paused row falls due", func(f *planFixture) { f.nextPaused = f.at.Add(5 * time.Second) }, 5 * time.Second},
		{"a poll", func(f *planFixture) { f.waker.pollAt = f.at.Add(3 * time.Millisecond) }, 3 * time.Millisecond},
		{"a small claim's wait", func(f *planFixture) { f.claimAt = f.at.Add(time.Millisecond) }, time.Millisecond},
		{"a stage's tokens", func(f *planFixture) { f.tokensAt = f.at.Add(40 * time.Millisecond) }, 40 * time.Millisecond},
		{"tokens back already: no deadline of theirs", func(f *planFixture) { f.tokensAt = f.at.Add(-time.Second) }, -1},
		{"the wake flag to write", func(f *planFixture) { f.waker.write = queue.ArmOn }, 0},
	} {
		f := newPlan(t)
		f.waker.write, f.waker.pollAt = queue.ArmKeep, time.Time{}
		c.setup(f)
		if got := f.next(loopState{}); got != c.want {
			t.Errorf("%s: next deadline %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPlannerSettleGate: a settle goes at once with many verdicts, when
// stopping, for a keyed stage's answers, and when no answer is still to
// come; a small one waits settleDelay for more while answers are due; none
// goes while one is in flight, without the lock, or with no verdicts.
func TestPlannerSettleGate(t *testing.T) {
	due := loopState{answersDue: yes}
	for _, c := range []struct {
		name  string
		setup func(f *planFixture) loopState
		wait  time.Duration // -1: goes now; -2: not at all, no deadline
	}{
		{"no verdicts", func(*planFixture) loopState { return due }, -2},
		{"a settle in flight", func(f *planFixture) loopState { f.verdicts("b", 1, 40); f.settleRunning = true; return due }, -2},
		{"without the lock", func(f *planFixture) loopState { f.verdicts("b", 1, 40); return loopState{lockless: true} }, -2},
		{"a batch worth it", func(f *planFixture) loopState { f.verdicts("b", 1, settleWorth); return due }, -1},
		{"a few, answers to come: waits", func(f *planFixture) loopState { f.verdicts("b", 1, 3); return due }, settleDelay},
		{"a few, no answer to come", func(f *planFixture) loopState { f.verdicts("b", 1, 3); return loopState{} }, -1},
		{"a few, stopping", func(f *planFixture) loopState {
			f.verdicts("b", 1, 3)
			return loopState{stopping: true, answersDue: yes}
		}, -1},
		{"a few of a keyed stage", func(f *planFixture) loopState { f.verdicts("a", 1, 1); f.keyedAnswers(); return due }, -1},
	} {
		f := newPlan(t)
		s := c.setup(f)
		ok, wait := f.settleGate(f.at, s)
		switch c.wait {
		case -1:
			if !ok || f.settle(s) == nil {
				t.Errorf("%s: no settle now", c.name)
			}
		case -2:
			if ok || !wait.IsZero() || f.settle(s) != nil {
				t.Errorf("%s: settle %v, wait %v; want none and no deadline", c.name, ok, wait)
			}
		default:
			if ok || wait.Sub(f.at) != c.wait {
				t.Errorf("%s: settle %v, wait %v; want a wait of %v", c.name, ok, wait.Sub(f.at), c.wait)
			}
			if f.settle(s) != nil {
				t.Errorf("%s: a settle started before its wait", c.name)
			}
			// The wait is kept, not moved on by a later look, and the
			// settle goes at its end with what came meanwhile.
			f.at = f.at.Add(time.Millisecond)
			f.verdicts("b", 100, 1)
			if _, w := f.settleGate(f.at, s); w.Sub(f.at) != c.wait-time.Millisecond {
				t.Errorf("%s: the wait moved to %v", c.name, w.Sub(f.at))
			}
			f.at = f.at.Add(c.wait)
			if tt := f.settle(s); tt == nil || len(tt.Settles) != 4 {
				t.Errorf("%s: after the wait: %+v, want the 4 verdicts", c.name, tt)
			}
		}
	}
}

// TestPlannerNoSpin: whatever the state, after a step of the loop (the
// planner asked for a settle and a claim, as the loop does) the next
// deadline is never now unless the step started something: a deadline
// with nothing to start would spin the loop.
func TestPlannerNoSpin(t *testing.T) {
	n := 0
	for mask := range 1 << 9 {
		f := newPlan(t)
		bit := func(i int) bool { return mask&(1<<i) != 0 }
		s := loopState{stopping: bit(0), lockless: bit(1), sweeping: bit(2)}
		if bit(3) {
			s.answersDue = yes
		}
		if bit(4) {
			f.verdicts("b", 1, 3)
		}
		if bit(5) {
			f.waker.pollAt = f.at.Add(-time.Millisecond)
		}
		if bit(6) {
			for _, r := range f.room {
				r.n = 0
			}
		}
		if bit(7) {
			f.nextPaused = f.at.Add(-time.Second)
		}
		if bit(8) {
			f.claimRunning = true
		}
		// The step: as the loop takes it, a settle, then a claim.
		started := f.settle(s) != nil
		started = f.claim(s) != nil || started
		if !started && f.next(s) == 0 {
			t.Errorf("state %09b (%+v): nothing started, next deadline now", mask, s)
		}
		n++
	}
	t.Logf("%d states", n)
}

// TestPlannerClaim: a claim goes to every stage with room that may have
// work, at its room, with a keyed stage's held keys; a stage that filled
// its cap may have more, one that did not has none, unless a settle made
// rows pending there meanwhile or a wake came.
func TestPlannerClaim(t *testing.T) {
	f := newPlan(t)
	f.waker.write = queue.ArmKeep
	tt := f.claim(loopState{})
	if tt == nil || !tt.Resume || capOf(tt, "a") != 8 || capOf(tt, "b") != 4 {
		t.Fatalf("first claim: %+v, want a resume and caps a 8, b 4", tt)
	}
	if f.claim(loopState{}) != nil {
		t.Fatal("a second claim while the first is in flight")
	}
	// a filled its cap; b took one of 4, but a settle made rows pending at
	// b meanwhile.
	f.settleRunning = true
	st := &queue.Turn{Settles: []queue.Settle{{ID: 50, Stage: "a"}}}
	f.settleDone(st, &queue.TurnResult{Settled: []queue.Settled{{ID: 50, Before: queue.Running, After: queue.Pending, Stage: "b", Handed: "a"}}})
	res := &queue.TurnResult{}
	for i := range int64(8) {
		res.Claimed = append(res.Claimed, queue.Claimed{ID: i + 1, Stage: "a", Key: fmt.Sprint("k", i), Keyed: true})
	}
	res.Claimed = append(res.Claimed, queue.Claimed{ID: 9, Stage: "b"})
	f.claimDone(tt, res, f.at)
	if a, b := f.byName["a"], f.byName["b"]; !a.more || !a.filled || !b.more || b.filled {
		t.Errorf("after the claim: a more %v filled %v, b more %v filled %v; want a both, b more only", a.more, a.filled, b.more, b.filled)
	}
	if n := len(f.byName["a"].keys.held); n != 8 {
		t.Errorf("a holds %d keys, want 8", n)
	}
	// The workers took them all; a claim now finds no room, and is not
	// made but for the wake flag's sake.
	f.room["a"].n, f.room["b"].n = 0, 0
	if tt := f.claim(loopState{}); tt != nil && len(tt.Caps) != 0 {
		t.Errorf("a claim with no room: %+v", tt.Caps)
	}
}

// TestPlannerSettleCarriesClaim: the answers of a keyed stage free their
// keys, and their settle carries that stage's claim with those keys no
// longer held, unless the claim lane claims for it; its result takes the
// stage's claim back from the settle.
func TestPlannerSettleCarriesClaim(t *testing.T) {
	f := newPlan(t)
	f.holdClaimed([]queue.Claimed{{ID: 1, Stage: "a", Key: "x", Keyed: true}, {ID: 2, Stage: "a", Key: "y", Keyed: true}})
	f.verdict(queue.Settle{ID: 1, Stage: "a", Verdict: queue.Finish})
	f.keyedAnswers()
	st := f.settle(loopState{answersDue: yes})
	if st == nil || len(st.Caps) != 1 || st.Caps[0].Stage != "a" || len(st.Caps[0].Held) != 1 || st.Caps[0].Held[0].Key != "y" {
		t.Fatalf("the settle: %+v, want a's claim with y held", st)
	}
	// The claim lane claims for b only meanwhile.
	if tt := f.claim(loopState{}); tt == nil || capOf(tt, "a") != 0 || capOf(tt, "b") == 0 {
		t.Fatalf("the claim beside the settle: %+v, want b's only", tt)
	}
	f.settleDone(st, &queue.TurnResult{Settled: []queue.Settled{{ID: 1, Before: queue.Running, After: queue.Done, Stage: "a", Handed: "a"}},
		Claimed: []queue.Claimed{{ID: 3, Stage: "a", Key: "x", Keyed: true}}})
	a := f.byName["a"]
	if a.settling || a.keys.held["x"] != 1 || a.keys.held["y"] != 1 || a.keys.of[3] != "x" || a.keys.of[1] != "" {
		t.Errorf("after the settle: settling %v, held %v of %v", a.settling, a.keys.held, a.keys.of)
	}
	// With the claim lane's claim in flight for a, a settle freeing y goes
	// alone.
	f.verdict(queue.Settle{ID: 2, Stage: "a", Verdict: queue.Finish})
	f.claimRunning, f.caps = true, []queue.StageCap{{Stage: "a", Cap: 1}}
	if st := f.settle(loopState{}); st == nil || len(st.Caps) != 0 {
		t.Errorf("a settle beside a claim for its stage: %+v, want it alone", st)
	}
}

// TestPlannerFailures: a failed settle's verdicts go again ahead of the
// newer ones, and no claim goes before them; a failed claim's resume is
// asked for again.
func TestPlannerFailures(t *testing.T) {
	f := newPlan(t)
	f.verdicts("b", 1, 2)
	st := f.settle(loopState{})
	f.verdicts("b", 10, 1)
	f.settleFailed(st)
	if len(f.settles) != 3 || f.settles[0].ID != 1 || f.settles[2].ID != 10 {
		t.Fatalf("after a failed settle: %+v", f.settles)
	}
	if held, _ := f.claimGate(f.at, loopState{}); !held {
		t.Error("a claim may go before the failed settle goes again")
	}
	st = f.settle(loopState{})
	f.settleDone(st, &queue.TurnResult{})
	if held, _ := f.claimGate(f.at, loopState{}); held {
		t.Error("claims still held after the settle went through")
	}
	tt := f.claim(loopState{})
	if tt == nil || !tt.Resume {
		t.Fatalf("claim %+v, want a resume", tt)
	}
	f.claimFailed(tt)
	if tt := f.claim(loopState{}); tt == nil || !tt.Resume {
		t.Errorf("after a failed claim: %+v, want the resume again", tt)
	}
}

// TestPlannerPausedDue: a settle that pauses rows brings the next resume
// forward, also for the claim in flight, whose snapshot may not see them.
func TestPlannerPausedDue(t *testing.T) {
	f := newPlan(t)
	tt := f.claim(loopState{})
	if tt == nil || !tt.Resume {
		t.Fatal("no resume")
	}
	f.verdicts("b", 1, 1)
	st := f.settle(loopState{})
	due := f.at.Add(2 * time.Second)
	f.settleDone(st, &queue.TurnResult{Settled: []queue.Settled{{ID: 1, Before: queue.Running, After: queue.Paused, Stage: "b", Handed: "b", Timeout: due}}})
	f.claimDone(tt, &queue.TurnResult{NextPaused: f.at.Add(time.Hour)}, f.at)
	if !f.nextPaused.Equal(due) {
		t.Errorf("next paused %v, want the settle's %v", f.nextPaused, due)
	}
}
