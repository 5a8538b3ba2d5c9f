package dispatch

import (
	"context"
	"time"
)

// expireBatch is how many rows, by id, one retention step looks at.
const expireBatch = 1000

// sweeps runs the orphan and retention sweeps when they are due.
func (d *Dispatcher) sweeps(ctx context.Context, now time.Time) error {
	dc := &d.cfg.Dispatch
	if d.orphansNow || !now.Before(d.nextOrphans) {
		age := dc.OrphanSweep
		if d.orphansNow {
			age = 0
		}
		n, err := d.db.ResetOrphans(ctx, d.held(), age)
		if err != nil {
			return err
		}
		d.orphansNow, d.nextOrphans = false, now.Add(dc.OrphanSweep)
		if n > 0 {
			d.log.Warn("reset running rows no worker holds", "count", n)
			d.tally.global.Orphans += n
			d.tally.dirty = true
			d.obs.OrphansRescued(n)
			d.woken()
		}
	}
	if dc.Retention > 0 && (d.expiring || !now.Before(d.nextExpire)) {
		last, n, err := d.db.ExpireDone(ctx, d.expireAfter, dc.Retention, expireBatch)
		if err != nil {
			return err
		}
		d.expiring, d.expireAfter = last != 0, last
		d.expired += n
		if n > 0 {
			d.tally.global.Expired += n
			d.tally.dirty = true
		}
		if !d.expiring {
			if d.expired > 0 {
				d.log.Info("retention: deleted done messages", "count", d.expired, "older_than", dc.Retention)
			}
			d.expired = 0
			d.nextExpire = now.Add(min(max(dc.Retention/24, time.Minute), time.Hour))
		}
	}
	return nil
}

// held lists the ids this dispatcher has claimed and not yet settled.
func (d *Dispatcher) held() []int64 {
	ids := make([]int64, 0, len(d.settles))
	for _, s := range d.settles {
		ids = append(ids, s.ID)
	}
	if j := d.settler.job; j != nil {
		for _, s := range j.turn.Settles {
			ids = append(ids, s.ID)
		}
	}
	for _, p := range d.pools {
		for _, w := range p.workers {
			ids = append(ids, w.inflight.ids[w.inflight.head:]...)
		}
	}
	return ids
}

// sweepDeadline is when the next sweep step is due.
func (d *Dispatcher) sweepDeadline(now time.Time) time.Time {
	if d.orphansNow || d.expiring {
		return now
	}
	next := d.nextOrphans
	if d.cfg.Dispatch.Retention > 0 && d.nextExpire.Before(next) {
		next = d.nextExpire
	}
	return next
}
