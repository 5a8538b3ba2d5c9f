package dispatch

import (
	"cmp"
	"slices"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// loopState is what the planner's gates need of the dispatcher's state now.
func (d *Dispatcher) loopState() loopState {
	return loopState{stopping: d.stopping, lockless: d.lockless, sweeping: d.sweepingOrphans(), answersDue: d.answersDueFn}
}

// startClaim sends the claim lane the planner's next claim, if it has one.
func (d *Dispatcher) startClaim(now time.Time) {
	l := &d.claimer
	if l.job != nil {
		return
	}
	j := &l.buf
	if !d.plan.nextClaim(now, d.loopState(), &j.turn) {
		return
	}
	if len(j.turn.Caps) > 0 {
		j.turn.Pass = d.passes.Next()
	}
	j.err = nil
	l.job = j
	l.jobs <- j
}

// finishClaim applies a claim lane's result: the planner's view, the
// resumed rows' count, and the claimed messages handed to workers.
func (d *Dispatcher) finishClaim(j *job, now time.Time) {
	t, res := &j.turn, &j.res
	if j.err != nil {
		d.plan.claimFailed(t)
		d.dbFailed(now, "claim", j.err)
		return
	}
	d.backoff.reset()
	d.outage.failing = false
	d.plan.claimDone(t, res, now)
	if t.Resume && res.Resumed > 0 {
		d.tally.global.Resumed += res.Resumed
		d.tally.dirty = true
	}
	d.handOut(res.Claimed, now)
}

// handOut gives claimed messages to workers, in (priority, id) order per
// stage; what cannot be handed out goes back.
func (d *Dispatcher) handOut(claimed []queue.Claimed, now time.Time) {
	if len(claimed) == 0 {
		return
	}
	d.tally.global.Claimed += int64(len(claimed))
	d.tally.dirty = true
	slices.SortFunc(claimed, func(a, b queue.Claimed) int {
		return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
	})
	for _, c := range claimed {
		p := d.byName[c.Stage]
		switch {
		case p == nil:
			// Its stage was changed by hand while the claim ran.
			d.plan.verdict(passOf(&c).settle(c.Stage, queue.NotRun))
		case d.stopping || d.lockless:
			// Claimed as the lock was lost or a stop began: not handed out.
			d.plan.verdict(passOf(&c).settle(p.cfg.Name, queue.NotRun))
		case d.assign(p, d.traced(&c, p), now):
			d.obs.Handed(p.cfg.Name, time.Duration(c.Waited*float64(time.Second)))
		}
	}
	for _, p := range d.pools {
		for _, w := range p.workers {
			w.flush()
		}
	}
}

// assign hands h to the earliest-started worker with a free slot,
// starting one if none has; a message no worker can take goes back.
func (d *Dispatcher) assign(p *pool, h pass, now time.Time) bool {
	w := p.pick()
	if w == nil && p.live() < p.cfg.Parallelism && !now.Before(p.coolUntil) {
		w = d.spawn(p, now)
	}
	if w == nil {
		d.plan.verdict(h.settle(p.cfg.Name, queue.NotRun))
		return false
	}
	w.hand(h, now)
	p.plan.handed(now)
	if w.inflight.len() == 1 {
		d.due(now.Add(d.cfg.Dispatch.MaxRuntime))
	}
	if w.handed >= p.cfg.MaxMessages {
		w.draining = true
	}
	return true
}
