package dispatch

import (
	"time"
)

// stopSlack is how long after SHUTDOWN_GRACE a stopping dispatcher waits
// for the database to take its last settles and statistics before it
// gives up on them: the next start's orphan reset puts the rows back.
const stopSlack = 5 * time.Second

// beginStop stops claiming, tells every worker to exit and the janitor's
// services to stop.
func (d *Dispatcher) beginStop() {
	if d.stopping {
		return
	}
	d.stopping = true
	close(d.role.quit)
	now := d.now()
	d.stopBy = now.Add(d.cfg.Dispatch.ShutdownGrace + stopSlack)
	for _, p := range d.pools {
		for _, w := range p.workers {
			d.stop(w, now, true)
		}
	}
}

// readyToWrapUp reports whether a stopping dispatcher may start its last
// chores: every worker gone, every verdict settled (or given up, the lock
// being another dispatcher's now), no job in flight, and the services
// stopped (a retention batch in flight ends first, so that what it deleted
// is counted). A dispatcher told to stop during an outage waits, until
// stopBy, for its lock to come back: its verdicts are then settled and
// counted, not left running for the next start to reset as orphans.
func (d *Dispatcher) readyToWrapUp() bool {
	return !d.wrapped && d.workerCount() == 0 && !d.busy() && (d.plan.unsettled() == 0 || d.lockGone) && !d.maintaining
}

// stopped reports whether the loop may return: every worker gone and the
// last chore done, or stopBy reached, whatever the workers and the
// database still do. A worker's exit is its process's (see startProcess),
// so one still there at stopBy did not die of the SIGKILL sent at
// SHUTDOWN_GRACE.
func (d *Dispatcher) stopped(now time.Time) bool {
	if !d.stopping {
		return false
	}
	return (d.workerCount() == 0 && d.wrapped && !d.busy()) || !now.Before(d.stopBy)
}

// result reports what a stop left undone and returns the loop's result.
// It writes nothing: what the database did not take in time stays as it
// is, and the next start puts running rows back.
func (d *Dispatcher) result(fatal error) error {
	unsettled := d.plan.unsettled() + d.plan.inFlight()
	if n := d.workerCount(); n > 0 {
		outstanding := 0
		for _, p := range d.pools {
			for _, w := range p.workers {
				outstanding += w.inflight.len()
			}
		}
		d.log.Error("giving up: workers did not exit after SIGKILL; their messages stay running until the next start resets them",
			"workers", n, "count", outstanding, "waited", d.cfg.Dispatch.ShutdownGrace+stopSlack)
	}
	switch {
	case unsettled > 0 && d.lockless:
		// Another dispatcher may hold the lock and these rows by now.
		d.log.Error("giving up: the dispatcher lock is not held; messages stay running until the next start resets them",
			"count", unsettled)
	case unsettled > 0 || d.busy():
		d.log.Error("giving up: the database did not answer in time; messages stay running until the next start resets them",
			"count", unsettled, "waited", d.cfg.Dispatch.ShutdownGrace+stopSlack)
	}
	if !d.wrapped && d.tally.dirty {
		d.log.Warn("statistics of the last passes not written")
	}
	d.observePools()
	d.obs.Health(false)
	d.log.Info("dispatcher stopped")
	return fatal
}
