package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// How the dispatcher learns of new messages.
//
// A NOTIFY serialises the commits of everyone who sends one (it holds the
// database-wide notification lock through its commit's WAL flush), so
// producers notify only while the dispatcher is armed: waiting, with
// nothing to do, for a notification (pepsi.wake.armed, read by the ingress
// trigger). While there is work the dispatcher is hot: not armed, it
// claims after every settle and polls: after pollGap while polls find a
// batch worth a round trip (batchWorth rows), after up to busyGapMax
// while they find only a few (a slow feed: the next poll finds more, and
// the dispatcher, its workers and the database pay for fewer round trips
// per message), and backing off, while nothing comes, to a twentieth of
// armAfter (quietGapMin to quietGapMax). After armAfter without work it
// arms.
//
// armAfter adapts to the feed, so that a busy feed with pauses in it does
// not make the flag flip (each arm makes every producer notify until the
// dispatcher, woken, writes it off again). The first claim after an arm
// ended tells what the arm cost: when it finds armCrowd rows or more,
// several producers committed (and notified) meanwhile, and when it finds
// none, the wake brought nothing this dispatcher can take (messages for
// another dispatcher's stages, stages without room): armAfter doubles, up
// to armAfterMax. When it finds a few, the feed is a trickle, whose
// notifications cost nothing and wake it sooner than a poll: armAfter
// halves, down to armAfterMin. Nor does the dispatcher arm while a stage
// that is full has more work waiting (a backlog): its workers' answers
// wake it, and it polls meanwhile.
//
// A producer whose trigger read "not armed" just before the arm committed
// sends nothing, and its rows may commit after the dispatcher's last claim.
// So arming is not done until a claim has run whose snapshot is past every
// such producer: the first turn after the arm reads the snapshot's xmax
// (every transaction that could have read the old flag started below it);
// the dispatcher polls until a turn's snapshot xmin reaches that horizon
// (every transaction below it has ended, its rows visible to the claim
// that follows in the same turn). Only then does it stop polling; while an
// older transaction stays open, the polls back off to armGapMax. A lost
// notification (the listener's connection failed) is made good by the
// reconnect's claim, and anything else by the listener's heartbeat, every
// POLL_INTERVAL: no message waits longer than that, and while the
// dispatcher is hot none waits longer than quietGapMax after its commit.
const (
	pollGap    = time.Millisecond     // between polls while work comes
	busyGapMax = 4 * time.Millisecond // between polls while they find only a few
	// Between polls while hot and quiet: up to a twentieth of armAfter,
	// within [quietGapMin, quietGapMax] (an idle dispatcher whose arms
	// proved costly polls seldom while it waits to arm).
	quietGapMin = 2 * time.Millisecond
	quietGapMax = 20 * time.Millisecond
	batchWorth  = 16                   // rows a poll must find to keep the next at pollGap
	armCrowd    = 4                    // rows found after an arm that show producers were busy
	armAfterMin = 3 * time.Millisecond // the least quiet before arming
	// armAfterMax is the most quiet before arming, however costly arms
	// proved: an idle dispatcher stops polling after this long. Each arm
	// that busy producers (or producers for other dispatchers' stages)
	// meet costs them their notifications until the dispatcher, woken,
	// clears the flag: about one arm a second of that costs them a few
	// percent (ten a second cost a third, measured with pgbench).
	armAfterMax = time.Second
	// armGapMax is the longest gap between polls while an open transaction
	// keeps the horizon from being reached: a message whose producer read
	// the flag as the dispatcher armed waits at most this long after its
	// commit.
	armGapMax = 100 * time.Millisecond
)

// wakeMode is where the dispatcher is between polling and waiting.
type wakeMode uint8

const (
	wakeHot    wakeMode = iota // not armed: producers do not notify; the loop polls
	wakeArming                 // armed, polling until a claim is past the horizon
	wakeArmed                  // armed and waiting: producers notify
)

// waker holds the wake mode and what the next turn must do for it.
type waker struct {
	mode    wakeMode
	write   queue.Arm     // the flag to write in the next turn
	pollAt  time.Time     // when the next poll is due; zero: none
	quiet   time.Time     // since when turns found nothing to do
	horizon int64         // while arming: the xmax of the first snapshot after the arm; 0 until read
	gap     time.Duration // while arming: the gap to the next poll

	busyGap  time.Duration // the gap after the next poll that finds work (adapts: see above)
	armAfter time.Duration // quiet this long before arming (adapts: see above)
	judging  bool          // the next claim's result adapts armAfter (an arm just ended)
	backlog  bool          // a full stage has more work: do not arm (set for each turn)
}

// start is the mode at start: hot, with the flag written off (a dispatcher
// that died armed leaves it on).
func (w *waker) start(now time.Time) {
	*w = waker{mode: wakeHot, write: queue.ArmOff, pollAt: now, quiet: now, busyGap: pollGap, armAfter: armAfterMin}
}

// hot goes hot from arming or armed: work came, or may have (a
// notification, a heartbeat). The next claim's result judges the arm.
func (w *waker) hot() {
	w.mode, w.write, w.busyGap, w.judging = wakeHot, queue.ArmOff, pollGap, true
}

// judge adapts armAfter to what the first claim after an arm found.
func (w *waker) judge(found int) {
	w.judging = false
	if after := w.armAfterNow(); found == 0 || found >= armCrowd {
		w.armAfter = min(2*after, armAfterMax)
	} else {
		w.armAfter = max(after/2, armAfterMin)
	}
}

// quietGap is the longest gap between polls while hot and quiet.
func (w *waker) quietGap() time.Duration {
	return min(max(w.armAfterNow()/20, quietGapMin), quietGapMax)
}

// armAfterNow is the quiet before the next arm (a zero waker's is the least).
func (w *waker) armAfterNow() time.Duration { return max(w.armAfter, armAfterMin) }

// woken goes hot on a notification or heartbeat: there may be work, and
// until it is gone producers need not notify.
func (w *waker) woken(now time.Time) {
	if w.mode != wakeHot {
		w.hot()
	}
	w.quiet = now
	w.pollAt = now
}

// pollDue reports whether a turn should claim at every stage with room
// even without other reason.
func (w *waker) pollDue(now time.Time) bool {
	return !w.pollAt.IsZero() && !now.Before(w.pollAt)
}

// turn fills t's wake parts; it is called for every turn that is started.
func (w *waker) turn(t *queue.Turn) {
	t.Arm, w.write = w.write, queue.ArmKeep
	t.Snapshot = w.mode == wakeArming
	w.pollAt = time.Time{}
}

// failed takes back what a failed turn was to write.
func (w *waker) failed(t *queue.Turn) {
	if w.write == queue.ArmKeep {
		w.write = t.Arm
	}
}

// done moves on after a claim lane's result: busy says whether it found
// work (resumed or claimed rows), stale whether the turn started before the
// latest wake (what it found says nothing of what the wake brought, and it
// does not judge the arm). Settles do not count: they say nothing of what
// producers send.
func (w *waker) done(t *queue.Turn, res *queue.TurnResult, busy, stale bool, now time.Time) {
	found := len(res.Claimed) + int(res.Resumed)
	if busy && w.mode != wakeHot {
		// Work came while arming: there is traffic again.
		w.hot()
	}
	if w.judging && !stale {
		w.judge(found)
	}
	if busy {
		w.quiet = now
		gap := max(w.busyGap, pollGap)
		w.pollAt = now.Add(gap)
		if found >= batchWorth {
			w.busyGap = pollGap
		} else {
			w.busyGap = min(2*gap, busyGapMax)
		}
		return
	}
	switch w.mode {
	case wakeHot:
		quiet := now.Sub(w.quiet)
		if quiet >= w.armAfterNow() && !w.backlog {
			w.mode, w.write, w.horizon, w.gap = wakeArming, queue.ArmOn, 0, pollGap
			w.pollAt = now
		} else {
			w.pollAt = now.Add(min(max(quiet/4, pollGap), w.quietGap()))
		}
	case wakeArming:
		switch {
		case !t.Snapshot || t.Arm == queue.ArmOn:
			// The arm was in this turn: the horizon comes from the next.
			w.pollAt = now
		case w.horizon == 0:
			w.horizon = res.Xmax
			w.pollAt = now
		case res.Xmin >= w.horizon:
			w.mode, w.pollAt = wakeArmed, time.Time{}
		default:
			// A transaction older than the horizon is still open.
			w.pollAt = now.Add(w.gap)
			w.gap = min(2*w.gap, armGapMax)
		}
	}
}

// hold puts a due hot poll off until t, when the dispatcher has work to
// claim (a stage's tokens return) and nothing before: it stays hot.
func (w *waker) hold(now, t time.Time) {
	if w.mode == wakeHot && w.pollDue(now) {
		w.pollAt = t
	}
}

// needsTurn reports whether the waker alone calls for a turn: a flag to
// write, or a poll while arming (its snapshot is needed even when no stage
// has room). A hot poll with no stage to claim for counts as a turn that
// found nothing.
func (w *waker) needsTurn(now time.Time) bool {
	if w.mode == wakeHot && w.write == queue.ArmKeep && w.pollDue(now) {
		w.done(&queue.Turn{}, &queue.TurnResult{}, false, false, now)
	}
	return w.write != queue.ArmKeep || (w.mode == wakeArming && w.pollDue(now))
}
