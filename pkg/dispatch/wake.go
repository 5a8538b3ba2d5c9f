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
// claims after every settle and, when a turn found nothing, polls again
// after pollGap. After armAfter without work it arms.
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
// POLL_INTERVAL: no message waits longer than that.
const (
	pollGap  = time.Millisecond     // between polls while hot or arming
	armAfter = 3 * time.Millisecond // without work before arming
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
}

// start is the mode at start: hot, with the flag written off (a dispatcher
// that died armed leaves it on).
func (w *waker) start(now time.Time) {
	*w = waker{mode: wakeHot, write: queue.ArmOff, pollAt: now, quiet: now}
}

// woken goes hot on a notification or heartbeat: there may be work, and
// until it is gone producers need not notify.
func (w *waker) woken(now time.Time) {
	if w.mode != wakeHot {
		w.mode, w.write = wakeHot, queue.ArmOff
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
// work (resumed or claimed rows). Settles do not count: they say nothing
// of what producers send.
func (w *waker) done(t *queue.Turn, res *queue.TurnResult, busy bool, now time.Time) {
	if busy {
		w.quiet = now
		if w.mode != wakeHot {
			// Work came while arming: there is traffic again.
			w.mode, w.write = wakeHot, queue.ArmOff
		}
		w.pollAt = now.Add(pollGap)
		return
	}
	switch w.mode {
	case wakeHot:
		if now.Sub(w.quiet) >= armAfter {
			w.mode, w.write, w.horizon, w.gap = wakeArming, queue.ArmOn, 0, pollGap
			w.pollAt = now
		} else {
			w.pollAt = now.Add(pollGap)
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
		w.done(&queue.Turn{}, &queue.TurnResult{}, false, now)
	}
	return w.write != queue.ArmKeep || (w.mode == wakeArming && w.pollDue(now))
}
