package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The work that is not per stage (the retention sweep, the vacuum check,
// the schedules, recording the ingress channel) is done by the holder of
// the janitor lock alone. The lock can change hands: a dispatcher whose
// lock session failed loses it, and another takes it at its next
// heartbeat. The services run while this dispatcher holds it (see docs/design.md, "Stage sets and
// standbys").

// janitorRole is the janitor lock as the dispatcher's goroutines see it:
// the listener's goroutine sets it when it takes the lock, the loop clears
// it when the lock session fails, and maintain starts and stops the
// services to match.
type janitorRole struct {
	held    atomic.Bool
	changed chan struct{} // held changed since maintain last looked
	quit    chan struct{} // closed as the dispatcher stops: the services stop for good
}

// newJanitorRole is a role not held.
func newJanitorRole() janitorRole {
	return janitorRole{changed: make(chan struct{}, 1), quit: make(chan struct{})}
}

// set records whether the lock is held.
func (r *janitorRole) set(held bool) {
	if r.held.Swap(held) != held {
		select {
		case r.changed <- struct{}{}:
		default: // maintain has a change to look at already
		}
	}
}

// has reports whether the lock is held.
func (r *janitorRole) has() bool { return r.held.Load() }

// maintain runs services while the role is held, until quit is closed;
// then it stops them and reports that they are over, after whatever they
// reported. A Stop waits for the statement in flight to end, so it runs
// here and not on the loop.
func (r *janitorRole) maintain(ctx context.Context, services []service, report chan<- serviceReport, log *slog.Logger) {
	running := false
	stopAll := func() {
		for i := len(services) - 1; i >= 0; i-- {
			services[i].Stop()
		}
		running = false
	}
	for {
		select {
		case <-r.quit:
			stopAll()
			select {
			case report <- serviceReport{over: true}:
			case <-ctx.Done(): // the loop gave up on the database and returned
			}
			return
		case <-r.changed:
		}
		switch held := r.has(); {
		case held && !running:
			for _, s := range services {
				if err := s.Start(ctx); err != nil {
					log.Error("janitor: a service did not start", "err", err)
				}
			}
			running = true
		case !held && running:
			stopAll()
		}
	}
}

// janitorServices are the services the configuration calls for, on db;
// they report to the loop on d.reports.
func janitorServices(d *Dispatcher, db Store) []service {
	dc := &d.cfg.Dispatch
	var s []service
	ddl := new(sync.Mutex) // retention's batches, one at a time with an ANALYZE
	if dc.Retention > 0 {
		s = append(s, &retention{store: db, log: d.log, now: d.now, keep: dc.Retention, retry: d.reconnectBackoff(), report: d.reports, ddl: ddl})
	}
	if dc.VacuumInterval > 0 {
		an := newAnalyzer(db, d.log)
		an.ddl = ddl
		s = append(s, &vacuum{store: db, log: d.log, every: dc.VacuumInterval, an: an})
	}
	if sc := newScheduler(d, db); sc != nil {
		s = append(s, sc)
	}
	s = append(s, newJoinSweep(d, db))
	return s
}

// serviceReport is what the services tell the loop: messages deleted, for
// the statistics; a statement that failed, for the metrics; or, last, that
// they are stopped for good.
type serviceReport struct {
	expired int64
	joined  []queue.Joined // joins the join sweep settled
	err     error
	over    bool
}

// reported books a report of the services'.
func (d *Dispatcher) reported(r serviceReport) {
	if r.over {
		d.maintaining = false
	}
	if r.expired > 0 {
		d.tally.global.Expired += r.expired
		d.tally.dirty = true
	}
	d.tally.joined(r.joined)
	for _, j := range r.joined {
		if st := d.plan.byName[j.Stage]; st != nil && !j.Failed {
			d.plan.markMore(st) // released there: worth a claim
		}
	}
	if r.err != nil && !queue.IsFenced(r.err) {
		d.obs.QueueRetry(reason(r.err))
		if queue.IsOutage(r.err) {
			d.dbDown()
		}
	}
}

// takeJanitor tries the janitor lock on lis (see queue.Listener.TryJanitor).
func (d *Dispatcher) takeJanitor(ctx context.Context, lis LockSession) error {
	if d.role.has() {
		return nil
	}
	ok, err := lis.TryJanitor(ctx)
	if err != nil {
		return err
	}
	if ok {
		d.role.set(true)
		d.log.Info("janitor: this dispatcher does the work that is not per stage (retention, vacuum, the schedules)")
	}
	return nil
}
