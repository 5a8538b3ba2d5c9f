package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// planner owns the queue's decisions and what they depend on: what to
// claim, for which stage, with which keys, rate and caps; when to settle
// the verdicts gathered, and the claim a settle carries; when paused rows
// fall due and when producers must notify. It runs no statement and
// starts no process: the dispatcher asks it for the next claim or settle
// (a queue.Turn), runs the turn on a lane and gives it the result back;
// the workers' room comes to it through each stage's slots, and what the
// dispatcher itself is doing (stopping, without its lock, sweeping) comes
// with each question as a loopState.
//
// Each gate is one predicate, claimGate and settleGate: what starts a
// claim or a settle is what sets the loop's next deadline for it, so the
// two cannot disagree (a deadline with nothing to start would spin the
// loop; a start with no deadline would wait for the next event).
type planner struct {
	stages  []*stagePlan
	byName  map[string]*stagePlan
	owned   []string // the stages the dispatcher owns (queue.Turn.Stages)
	set     string   // its set's name (queue.Turn.Set)
	keyed   bool     // some stage has KEY: claims and settles book keys
	backlog int      // verdicts waiting to be settled beyond which nothing is claimed: every stage's room

	traced func(*queue.Settle) // hears each verdict as it is made, while tracing; nil: off

	waker   waker  // polling or waiting for notifications
	wakeGen uint64 // counts wakes, so a claim's result does not hide a later one
	marks   uint64 // counts markMore calls

	// The claim lane's claims.
	claimRunning bool             // a claim is in flight
	claimGen     uint64           // wakeGen when it started
	claimMarks   uint64           // marks when it started
	claimResume  bool             // it resumes due paused rows
	claimPause   time.Time        // a claim with Resume: the earliest pause a settle reported meanwhile
	caps         []queue.StageCap // the caps of the claim in flight (and the buffer of the next)
	claimAt      time.Time        // a small claim waits until then for more room (zero: none waits)
	nextPaused   time.Time        // when the next paused row falls due (zero: none)
	checkPause   bool             // resume whatever is due with the next claim
	tokensAt     time.Time        // when a stage the last claim left out for want of tokens has them back (zero: none was)

	// The settle lane's settles.
	settles       []queue.Settle   // verdicts for the next settle
	spare         []queue.Settle   // the other verdicts buffer, while a settle has one
	sent          []queue.Settle   // the verdicts of the settle in flight
	settleRunning bool             // a settle is in flight
	settleAgain   bool             // the last settle failed: its verdicts go again before any claim
	settleClaims  bool             // the settle in flight carries a claim (claimWithSettle)
	settleCaps    []queue.StageCap // the caps of the claim it carries
	settleGen     uint64           // wakeGen when it started
	settleMarks   uint64           // marks when it started
	settleAt      time.Time        // a small settle waits until then for more answers (zero: none waits)
	settleNow     bool             // the next settle holds answers of a keyed stage: it does not wait

	// Graphs: the joins to settle with the next settle (parents a stage
	// moved to a join itself, found waiting by a settle), those the settle
	// in flight carries, and the stages whose JOIN_POLICY is all.
	joins     []int64
	joinsSent []int64
	joinAll   []string
}

// stagePlan is what the planner knows and decides of one stage.
type stagePlan struct {
	cfg      config.Stage
	slots    slots   // its workers' room
	more     bool    // pending rows may be waiting: worth a claim
	marked   uint64  // planner.marks when more was last set by a settle or resume
	settling bool    // the settle in flight carries this stage's claim (claimWithSettle)
	filled   bool    // its last claim took its whole cap: neither keys nor the backlog held it back
	rate     *bucket // RATE's tokens; nil: no RATE
	keys     *keys   // KEY's held keys; nil: no KEY
}

// slots is a stage's workers as the planner sees them.
type slots interface {
	// capacity is how many more messages they can take now: 0 while the
	// stage cools down.
	capacity(now time.Time) int
	// coolingDown reports whether the stage's program is held off until a
	// cooldown ends (its workers died before their first answer).
	coolingDown(now time.Time) bool
}

// loopState is what the dispatcher's own state says to the planner's gates.
type loopState struct {
	stopping bool // no more claims; a settle goes without waiting for more answers
	lockless bool // the lock session is gone: no queue work until it is back
	sweeping bool // the orphan sweep runs: it must know every row held, so no claim starts
	// answersDue reports whether some worker has messages in flight, whose
	// answers are still to come: asked only when a small settle could wait
	// for them (it walks the workers). Nil: none are.
	answersDue func() bool
}

// answers reports whether answers are still to come (loopState.answersDue).
func (s loopState) answers() bool { return s.answersDue != nil && s.answersDue() }

// newPlanner returns a planner of the stages a dispatcher owns (nil:
// every stage) under its set's name; add gives it its stages.
func newPlanner(owned []string, set string) *planner {
	return &planner{owned: owned, set: set, byName: make(map[string]*stagePlan)}
}

// add plans stage s, whose workers' room is sl.
func (p *planner) add(s config.Stage, sl slots) *stagePlan {
	st := &stagePlan{cfg: s, slots: sl, more: true}
	if s.Rate.Limited() {
		st.rate = newBucket(s.Rate.Count, s.Rate.Per)
	}
	if s.Keyed() {
		st.keys = newKeys()
		p.keyed = true
	}
	if s.JoinPolicy == config.JoinAll {
		p.joinAll = append(p.joinAll, s.Name)
	}
	p.stages = append(p.stages, st)
	p.byName[s.Name] = st
	p.backlog += s.Parallelism * s.QueueLimit
	return st
}

// start readies the planner as dispatching begins: hot, with the wake flag
// written off, due paused rows looked for, each RATE with a batch of
// tokens.
func (p *planner) start(now time.Time) {
	p.checkPause = true
	p.waker.start(now)
	p.startRates(now)
}

// woken marks every stage worth a claim and due paused rows worth a look:
// a notification, a heartbeat or a reconnect says there may be work.
func (p *planner) woken(now time.Time) {
	p.wakeGen++
	p.waker.woken(now)
	for _, st := range p.stages {
		st.more = true
	}
	p.checkPause = true
}

// claimGate is the claim's gate. held: no claim may start now whatever is
// due (a claim is in flight, the dispatcher is stopping or without its
// lock, the settles are behind or the last one failed, the orphan sweep
// runs); each ends with a lane's result, a reconnect or a stop, which wake
// the loop, so a held claim sets no deadline (a due one would spin the
// loop). Otherwise due is the earliest time a claim may be called for: a
// paused row falling due, a poll, a small claim's wait, a stage's tokens,
// a wake flag to write (now).
func (p *planner) claimGate(now time.Time, s loopState) (held bool, due time.Time) {
	// Answers free their workers before they are settled: while the
	// settles fall behind, claiming more only grows their backlog. And the
	// orphan sweep must know every row this dispatcher holds. A settle
	// that failed may have committed: it goes again before any claim, so
	// that no row it moved is handed out first (see queue's settleSQL).
	if p.claimRunning || s.stopping || s.lockless || len(p.settles) > p.backlog || s.sweeping || p.settleAgain {
		return true, time.Time{}
	}
	due = earliest(p.nextPaused, p.waker.pollAt)
	due = earliest(due, p.claimAt)
	if now.Before(p.tokensAt) {
		due = earliest(due, p.tokensAt)
	}
	if p.waker.write != queue.ArmKeep {
		due = now
	}
	return false, due
}

// settleGate is the settle's gate: whether a settle may start now and,
// when it may not yet, when it may (zero: not before an event: a verdict,
// the result of the settle in flight, the lock back). A settle of fewer
// than settleWorth verdicts waits up to settleDelay for more while
// answers are still to come.
func (p *planner) settleGate(now time.Time, s loopState) (ok bool, wait time.Time) {
	if p.settleRunning || s.lockless {
		return false, time.Time{}
	}
	if len(p.settles) == 0 {
		return len(p.joins) > 0, time.Time{}
	}
	if len(p.settles) < settleWorth && !s.stopping && !p.settleNow && s.answers() {
		at := p.settleAt
		if at.IsZero() {
			at = now.Add(settleDelay)
		}
		if now.Before(at) {
			return false, at
		}
	}
	return true, time.Time{}
}

// deadline passes to soon when the planner next has work for a lane: the
// deadlines of its gates.
func (p *planner) deadline(now time.Time, s loopState, soon func(time.Time)) {
	if ok, wait := p.settleGate(now, s); ok {
		soon(now)
	} else {
		soon(wait)
	}
	if held, due := p.claimGate(now, s); !held {
		soon(due)
	}
}

// markMore says that stage st may have pending rows; a claim in flight
// does not take that back (marks).
func (p *planner) markMore(st *stagePlan) {
	p.marks++
	st.more, st.marked = true, p.marks
}

// worthClaim says the stage may have pending rows: its workers had no
// room, or it cooled down, while they came.
func (st *stagePlan) worthClaim() { st.more = true }

// handed books a message handed to one of the stage's workers: it takes a
// RATE token.
func (st *stagePlan) handed(now time.Time) {
	if st.rate != nil {
		st.rate.take(1, now)
	}
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
