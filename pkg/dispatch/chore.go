package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// A chore is one of the loop's own statements besides its turns: the
// orphan sweep (orphans.go), a statistics write (flush.go), clearing the
// wake flag as the dispatcher stops. They need the loop's state (the rows
// it holds, its tallies), so the loop starts them; they run one at a time
// on the chore lane, off the loop, and their results come back to it.
type chore interface {
	// run runs the chore's statement; it runs on the chore lane.
	run(ctx context.Context, s choreStore) error
	// done applies the result on the loop; ok: run succeeded.
	done(d *Dispatcher, now time.Time, ok bool)
	// what names the chore in a log line.
	what() string
}

// choreLane is the chore goroutine and the chore it has in flight.
type choreLane struct {
	jobs chan chore
	job  chore // in flight, if any
}

// choreResult is a chore that ran, and how.
type choreResult struct {
	c   chore
	err error
}

// run runs the lane's chores on s one at a time until its channel is
// closed, and reports each to results. ctx is cancelled only when the
// dispatcher gives up on the database.
func (l *choreLane) run(ctx context.Context, s choreStore, results chan<- choreResult) {
	for c := range l.jobs {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := c.run(cctx, s)
		cancel()
		if queue.IsReadOnly(err) {
			s.Reset() // a demoted primary: the next connections find the new one
		}
		results <- choreResult{c, err}
	}
}

// startChore starts the chore due now, if any, on the chore lane. Without
// the lock the rows may be another dispatcher's by now: only the
// statistics are written. A stopping dispatcher writes its last
// statistics and clears its wake flag once it is ready to wrap up; then
// it is wrapped up.
func (d *Dispatcher) startChore(now time.Time) {
	if d.chores.job != nil {
		return
	}
	var c chore
	switch {
	case d.stopping && d.lockless && d.tally.pending():
		// Waiting for the lock, write what is counted already.
		c = &statsWrite{flushes: d.tally.flushes(nil)}
	case d.stopping && !d.readyToWrapUp():
		return
	case d.stopping && d.tally.pending():
		c = &statsWrite{flushes: d.tally.flushes(nil)}
	case d.stopping && !d.lockless && !d.disarmed:
		c = &disarm{set: d.set}
	case d.stopping:
		d.wrapped = true
		return
	case !d.lockless && d.orphansDue(now):
		c = d.orphanSweep()
	case d.tally.pending() && d.flushDue(now):
		c = &statsWrite{flushes: d.tally.flushes(nil)}
	default:
		return
	}
	d.chores.job = c
	d.chores.jobs <- c
}

// finishChore applies what a chore did, and retries it after a backoff
// if it failed.
func (d *Dispatcher) finishChore(r choreResult, now time.Time) {
	d.chores.job = nil
	r.c.done(d, now, r.err == nil)
	if r.err != nil {
		d.dbFailed(now, r.c.what(), r.err)
		return
	}
	d.backoff.reset()
}

// disarm clears the wake flag as the dispatcher stops: no one listens now.
type disarm struct {
	set string // the dispatcher's wake row
}

func (c *disarm) what() string { return "clearing the wake flag" }

func (c *disarm) run(ctx context.Context, s choreStore) error { return s.SetArmed(ctx, c.set, false) }

func (c *disarm) done(d *Dispatcher, _ time.Time, ok bool) { d.disarmed = d.disarmed || ok }
