package dispatch

import (
	"syscall"
	"time"
)

// watch enforces MAX_RUNTIME, idle reaping, recycling, kill deadlines and
// cooldown ends.
func (d *Dispatcher) watch(now time.Time) {
	dc := &d.cfg.Dispatch
	for _, p := range d.pools {
		if p.cooling && !now.Before(p.coolUntil) {
			p.plan.worthClaim()
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
