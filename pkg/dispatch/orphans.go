package dispatch

import (
	"context"
	"time"
)

// orphanSweep resets the running rows of this dispatcher's stages that
// none of its workers holds: a claim whose answer was lost with its
// connection, a dispatcher killed outright. It must know every row the
// dispatcher holds, so it starts only while no claim is in flight (a
// settle may carry one), and no claim starts while it runs.
type orphanSweep struct {
	held   []int64       // the ids this dispatcher holds
	age    time.Duration // reset only rows running longer than this
	stages []string      // the stages swept (nil: every one)
	reset  int64         // rows put back to pending
}

func (c *orphanSweep) what() string { return "orphan sweep" }

func (c *orphanSweep) run(ctx context.Context, s choreStore) (err error) {
	c.reset, err = s.ResetOrphans(ctx, c.held, c.age, c.stages...)
	return err
}

func (c *orphanSweep) done(d *Dispatcher, now time.Time, ok bool) {
	if !ok {
		return
	}
	d.orphansNow, d.nextOrphans = false, now.Add(d.cfg.Dispatch.OrphanSweep)
	if c.reset > 0 {
		d.log.Warn("reset running rows no worker holds", "count", c.reset)
		d.tally.global.Orphans += c.reset
		d.tally.dirty = true
		d.obs.OrphansRescued(c.reset)
		d.woken()
	}
}

// orphansDue reports whether the orphan sweep may start now: every
// ORPHAN_SWEEP, at once after a reconnect, and only while no claim is in
// flight.
func (d *Dispatcher) orphansDue(now time.Time) bool {
	return !d.plan.claimInFlight() && (d.orphansNow || !now.Before(d.nextOrphans))
}

// orphanSweep is the sweep due now: of rows running for ORPHAN_SWEEP, or
// of any age after a reconnect.
func (d *Dispatcher) orphanSweep() *orphanSweep {
	c := &orphanSweep{held: d.held(nil), age: d.cfg.Dispatch.OrphanSweep, stages: d.owned}
	if d.orphansNow {
		c.age = 0
	}
	return c
}

// sweepingOrphans reports whether an orphan sweep is in flight.
func (d *Dispatcher) sweepingOrphans() bool {
	_, ok := d.chores.job.(*orphanSweep)
	return ok
}

// held appends to ids the ids this dispatcher has claimed and not yet
// settled.
func (d *Dispatcher) held(ids []int64) []int64 {
	ids = d.plan.held(ids)
	for _, p := range d.pools {
		for _, w := range p.workers {
			for _, h := range w.inflight.ids[w.inflight.head:] {
				ids = append(ids, h.id)
			}
		}
	}
	return ids
}
