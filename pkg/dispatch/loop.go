package dispatch

import (
	"context"
	"syscall"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// idleFlushGap is the least time between two flushes made because the
// pipeline went idle.
const idleFlushGap = time.Second

// loop is the dispatcher's one goroutine: it handles events, then takes a
// turn (enforce deadlines, sweep, start the next queue job), then sleeps
// until the next event, job result or deadline. One queue job (resume,
// settle, claim: one round trip) is in flight at a time; what workers
// answer meanwhile goes into the next one, so batches grow with the load.
func (d *Dispatcher) loop(ctx, lctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	done := ctx.Done()
	var fatal error
	for {
		now := d.now()
		d.turn(now)
		if d.stopping && d.workerCount() == 0 && !d.busy() {
			return d.finish(fatal)
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
		case <-d.wake:
			d.woken()
		case err := <-d.lisErr:
			// The lock went with the session: another dispatcher may take
			// it now. Until the lock is ours again the queue is not ours
			// either: answers are kept, nothing is claimed.
			d.lockless = true
			d.log.Error("listener connection failed; reconnecting", "err", err)
			d.obs.Health(false)
			d.obs.Reconnect(ConnListener, reason(err))
			d.goBackground(func() { d.relisten(lctx) })
		case lis := <-d.relisen:
			_ = d.lis.Close(ctx)
			d.lis = lis
			d.lockless = false
			d.goBackground(func() { d.listen(lctx, lis) })
			d.woken()
			d.orphansNow = true
			d.obs.Health(true)
			d.log.Info("listener reconnected")
		case err := <-d.fatal:
			d.log.Error("stopping", "err", err)
			fatal = err
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
// current before the turn.
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

// woken marks every stage worth a claim and due paused rows worth a look.
func (d *Dispatcher) woken() {
	d.wakeGen++
	d.waker.woken(d.now())
	for _, p := range d.pools {
		p.more = true
	}
	d.checkPause = true
}

// opTimeout bounds one queue statement. Statements do not run under the
// loop's context: a stop must not cancel a claim or settle half-way, leaving
// rows changed that the loop does not know of.
const opTimeout = 30 * time.Second

// turn does the work the events and clock call for. The sweeps run only
// while no claim is in flight: the orphan sweep must know every row this
// dispatcher holds.
func (d *Dispatcher) turn(now time.Time) {
	d.watch(now)
	if now.Before(d.retryAt) || d.lockless {
		return
	}
	if !d.stopping && d.claimer.job == nil && (!now.Before(d.sweepDeadline(now)) || d.flushDue(now)) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := d.sweeps(ctx, now)
		if err == nil {
			d.maybeFlush(ctx, now)
		}
		cancel()
		if err != nil {
			d.dbFailed(now, "sweep", err)
			return
		}
	}
	d.startJobs(now)
}

// dbFailed holds queue work off for a backoff that doubles, with jitter,
// from RECONNECT_MIN to RECONNECT_MAX while failures go on.
func (d *Dispatcher) dbFailed(now time.Time, what string, err error) {
	dc := &d.cfg.Dispatch
	d.backoff = min(max(2*d.backoff, dc.ReconnectMin), dc.ReconnectMax)
	wait := jitter(d.backoff)
	d.log.Error("database: "+what+" failed; retrying", "err", err, "next_in", wait.Round(time.Millisecond))
	d.retryAt = now.Add(wait)
	d.obs.Reconnect(ConnQueue, reason(err))
	if queue.IsReadOnly(err) {
		// A demoted primary: drop every connection so that the next ones
		// find the new primary.
		d.db.Reset()
	}
}

// watch enforces MAX_RUNTIME, idle reaping, recycling, kill deadlines and
// cooldown ends.
func (d *Dispatcher) watch(now time.Time) {
	dc := &d.cfg.Dispatch
	for _, p := range d.pools {
		if p.cooling && !now.Before(p.coolUntil) && !p.more {
			p.more = true
		}
	}
	if now.Before(d.workerDue) {
		// No worker has a deadline yet: the loop wakes many times a
		// millisecond under load, and walking every worker each time was
		// a fifth of its CPU.
		return
	}
	for _, p := range d.pools {
		for _, w := range p.workers {
			switch {
			case w.stopping:
				if !w.killAt.IsZero() && !now.Before(w.killAt) {
					d.log.Warn("worker did not exit in time; killing", "stage", p.cfg.Name, "pid", w.proc.pid)
					w.proc.signal(syscall.SIGKILL)
					w.killAt = time.Time{}
				}
			case w.inflight.len() > 0 && now.Sub(w.headAt) >= dc.MaxRuntime:
				d.timeout(w, now)
			case w.inflight.len() == 0 && w.draining:
				d.log.Info("recycling worker", "stage", p.cfg.Name, "pid", w.proc.pid, "messages", w.handed)
				d.stop(w, now, false)
			case w.inflight.len() == 0 && now.Sub(w.idleAt) >= dc.WorkerIdleTimeout:
				d.log.Debug("stopping idle worker", "stage", p.cfg.Name, "pid", w.proc.pid)
				d.stop(w, now, false)
			}
		}
	}
	d.workerDue = d.workerDeadline(now)
}

// workerDeadline is the earliest deadline of any worker: its kill, its
// head message's MAX_RUNTIME, its recycling or its idle timeout; an hour
// from now when none has one sooner.
func (d *Dispatcher) workerDeadline(now time.Time) time.Time {
	dc := &d.cfg.Dispatch
	next := now.Add(time.Hour)
	for _, p := range d.pools {
		for _, w := range p.workers {
			var t time.Time
			switch {
			case w.stopping:
				t = w.killAt
			case w.inflight.len() > 0:
				t = w.headAt.Add(dc.MaxRuntime)
			case w.draining:
				t = now
			default:
				t = w.idleAt.Add(dc.WorkerIdleTimeout)
			}
			if !t.IsZero() && t.Before(next) {
				next = t
			}
		}
	}
	return next
}

// due brings the next worker deadline forward to t if t is earlier:
// whatever gives a worker a deadline calls it.
func (d *Dispatcher) due(t time.Time) {
	if t.Before(d.workerDue) {
		d.workerDue = t
	}
}

// nextDeadline is when the loop must wake even without events.
func (d *Dispatcher) nextDeadline(now time.Time) time.Time {
	dc := &d.cfg.Dispatch
	next := now.Add(dc.StatsInterval)
	soon := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	switch {
	case d.lockless:
		// The reconnected listener wakes it.
	case now.Before(d.retryAt):
		soon(d.retryAt)
	default:
		if len(d.settles) > 0 && d.settler.job == nil {
			soon(now)
		}
		if d.claimer.job != nil {
			// Its result wakes the loop.
			break
		}
		if d.tally.dirty {
			soon(d.lastFlush.Add(dc.StatsInterval))
			if d.idle() {
				soon(d.lastFlush.Add(idleFlushGap))
			}
		}
		soon(d.nextPaused)
		if !d.stopping {
			soon(d.sweepDeadline(now))
			soon(d.waker.pollAt)
			soon(d.claimAt)
			if d.waker.write != queue.ArmKeep {
				soon(now)
			}
		}
	}
	for _, p := range d.pools {
		if now.Before(p.coolUntil) {
			soon(p.coolUntil)
		}
	}
	soon(d.workerDue)
	return next
}

// idle reports whether no message is in flight and nothing waits to be settled.
func (d *Dispatcher) idle() bool {
	if len(d.settles) > 0 || d.busy() {
		return false
	}
	for _, p := range d.pools {
		for _, w := range p.workers {
			if w.inflight.len() > 0 {
				return false
			}
		}
	}
	return true
}

// maybeFlush writes the statistics every STATS_INTERVAL, or when the
// pipeline went idle (at most once per idleFlushGap).
func (d *Dispatcher) maybeFlush(ctx context.Context, now time.Time) {
	if d.flushDue(now) {
		d.flushStats(ctx, now)
	}
}

// flushDue reports whether the statistics should be written now.
func (d *Dispatcher) flushDue(now time.Time) bool {
	return d.tally.dirty && (!now.Before(d.lastFlush.Add(d.cfg.Dispatch.StatsInterval)) ||
		(d.idle() && !now.Before(d.lastFlush.Add(idleFlushGap))))
}

// flushStats writes the deltas in one transaction.
func (d *Dispatcher) flushStats(ctx context.Context, now time.Time) {
	stages, global := d.tally.snapshot()
	if err := d.db.AddStats(ctx, stages, global); err != nil {
		d.log.Error("database: writing statistics failed; will retry", "err", err)
		d.lastFlush = now.Add(-d.cfg.Dispatch.StatsInterval).Add(time.Second)
		return
	}
	d.tally.reset()
	d.lastFlush = now
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
