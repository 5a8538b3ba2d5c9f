package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// loop is the dispatcher's one goroutine: it handles events, then takes a
// step (enforce deadlines, start the lanes' next jobs), then sleeps until
// the next event, job result, service report or deadline. Each lane has
// one job in flight at a time; what workers answer meanwhile goes into the
// next one, so batches grow with the load. The loop runs no statement
// itself: a stalled database holds up the lanes, never the loop, so
// timeouts, exits and signals are handled on time whatever the database
// does.
func (d *Dispatcher) loop(ctx, lctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	done := ctx.Done()
	var fatal error
	for {
		now := d.now()
		d.step(now)
		if d.stopped(now) {
			return d.result(fatal)
		}
		d.observePools()
		timer.Reset(max(d.nextDeadline(now).Sub(d.now()), 0))
		select {
		case ev := <-d.events:
			d.handle(ev)
			d.drainEvents()
		case j := <-d.results:
			d.finishJob(j, d.now())
			d.drainEvents()
		case r := <-d.choreRes:
			d.finishChore(r, d.now())
			d.drainEvents()
		case r := <-d.reports:
			d.reported(r)
		case <-d.wake:
			d.woken()
		case err := <-d.lisErr:
			// The lock went with the session: another dispatcher may take
			// it now. Until the lock is ours again the queue is not ours
			// either: answers are kept, nothing is claimed.
			d.lockless = true
			d.role.set(false)
			d.log.Error("listener connection failed; reconnecting", "err", err)
			d.obs.Health(false)
			d.obs.ListenerReconnect(reason(err))
			d.goBackground(func() { d.relisten(lctx) })
		case lis := <-d.relisen:
			d.lockless, d.lockGone = false, false
			d.goBackground(func() { d.listen(lctx, lis) })
			d.woken()
			d.orphansNow = true
			d.obs.Health(true)
			d.log.Info("listener reconnected")
		case err := <-d.fatal:
			d.log.Error("stopping", "err", err)
			fatal = err
			// Lockless, the reconnect has given up: a stop must not wait
			// for the lock any longer.
			d.lockGone = d.lockless
			d.beginStop()
		case <-timer.C:
		case <-done:
			done = nil
			d.log.Info("stopping: signal received")
			d.beginStop()
		}
	}
}

// drainEvents handles every event already queued, so that capacities are
// current before the step.
func (d *Dispatcher) drainEvents() {
	for {
		select {
		case ev := <-d.events:
			d.handle(ev)
		default:
			return
		}
	}
}

// woken tells the planner there may be work: a notification, a heartbeat,
// a reconnect.
func (d *Dispatcher) woken() { d.plan.woken(d.now()) }

// step does the work the events and clock call for.
func (d *Dispatcher) step(now time.Time) {
	d.watch(now)
	if now.Before(d.retryAt) {
		return
	}
	if d.lockless {
		// Only the statistics may be written.
		d.startChore(now)
		return
	}
	d.startJobs(now)
}

// dbFailed holds queue work off for a backoff that doubles, with jitter,
// from RECONNECT_MIN to RECONNECT_MAX while failures go on.
func (d *Dispatcher) dbFailed(now time.Time, what string, err error) {
	wait := d.backoff.next()
	d.retryAt = now.Add(wait)
	logRetry(d.log, what, err, wait)
	if queue.IsFenced(err) {
		// The lock session died under the statement: the listener's
		// reconnect is what counts it, and re-takes the lock.
		return
	}
	d.obs.QueueRetry(reason(err))
	if queue.IsOutage(err) {
		d.dbDown()
	}
}

// logRetry logs a statement that failed and is tried again after wait.
func logRetry(log *slog.Logger, what string, err error, wait time.Duration) {
	if queue.IsFenced(err) {
		log.Warn("database: "+what+" refused: the lock session is gone; retrying", "next_in", wait.Round(time.Millisecond))
		return
	}
	log.Error("database: "+what+" failed; retrying", "err", err, "next_in", wait.Round(time.Millisecond))
}

// nextDeadline is when the loop must wake even without events. A lane
// with a job in flight wakes it with the result.
func (d *Dispatcher) nextDeadline(now time.Time) time.Time {
	dc := &d.cfg.Dispatch
	next := now.Add(dc.StatsInterval)
	soon := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	if now.Before(d.retryAt) {
		soon(d.retryAt)
	} else {
		if d.chores.job == nil {
			d.choreDeadlines(now, soon)
		}
		d.plan.deadline(now, d.loopState(), soon)
	}
	if d.stopping {
		soon(d.stopBy)
	}
	for _, p := range d.pools {
		if now.Before(p.coolUntil) {
			soon(p.coolUntil)
		}
	}
	soon(d.workerDue)
	return next
}

// choreDeadlines passes to soon when the next chores fall due.
func (d *Dispatcher) choreDeadlines(now time.Time, soon func(time.Time)) {
	dc := &d.cfg.Dispatch
	if d.stopping {
		// The last chore waits for the workers and settles: their
		// events wake the loop.
		return
	}
	if d.tally.dirty {
		soon(d.lastFlush.Add(dc.StatsInterval))
		if d.idle() {
			soon(d.lastFlush.Add(idleFlushGap))
		}
	}
	if d.lockless {
		return
	}
	if !d.plan.claimInFlight() {
		// The orphan sweep starts only while no claim is in flight: the
		// claim's result wakes the loop.
		if d.orphansNow {
			soon(now)
		}
		soon(d.nextOrphans)
	}
}

// idle reports whether no message is in flight and nothing waits to be settled.
func (d *Dispatcher) idle() bool {
	return d.plan.unsettled() == 0 && !d.busy() && !d.answersDue()
}

// observePools reports each stage's workers and messages in flight.
func (d *Dispatcher) observePools() {
	for _, p := range d.pools {
		inflight := 0
		for _, w := range p.workers {
			inflight += w.inflight.len()
		}
		d.obs.Pool(p.cfg.Name, len(p.workers), inflight)
	}
}

func (d *Dispatcher) workerCount() int {
	n := 0
	for _, p := range d.pools {
		n += len(p.workers)
	}
	return n
}
