package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// A settle that frees keys carries the claim of their stages: the claim
// runs after the settle in its transaction, so the next message of each
// freed key is taken in the same round trip and commit that freed it. A
// key's messages pass one at a time, so that round trip, not the database,
// sets a hot key's pace. A stage is claimed for by one job at a time (its
// caps and held keys are the dispatcher's whole view of it): the settle
// takes only stages the claim in flight does not, and the claim lane skips
// the stages the settle took, so other stages' claims go on beside it.
// Stages with RATE are left to the claim lane, which books their tokens,
// and so are stages whose last claim took its whole cap with a key it had
// not just given back (filled): their keys are many, a freed key is one of
// plenty to take, and the claim lane's claim goes beside the settle
// without waiting for its commit.

// claimWithSettle adds to j's settle a claim for each keyed stage whose
// keys it frees, with the held keys less those; it returns whether it did.
func (d *Dispatcher) claimWithSettle(j *job, now time.Time) bool {
	if !d.keyed || d.stopping || d.lockless || d.settleAgain || d.sweepingOrphans() {
		return false
	}
	caps := d.settleCaps[:0]
	for _, p := range d.pools {
		if p.keys == nil || p.rate != nil || p.filled || d.claiming(p) {
			continue
		}
		freed := p.keys.freeing(j.turn.Settles, p.cfg.Name)
		if freed == 0 {
			continue
		}
		if c := p.capacity(now); c > 0 {
			caps = append(caps, queue.StageCap{Stage: p.cfg.Name, Cap: c, KeyLimit: p.cfg.KeyLimit, Held: p.keys.snapshotLess()})
			p.settling = true
		}
	}
	d.settleCaps = caps
	if len(caps) == 0 {
		return false
	}
	j.turn.Caps = caps
	j.gen, j.marks = d.wakeGen, d.marks
	return true
}

// settledClaim applies the claim a settle carried, after the settle's own
// result: the rows that settle made pending at those stages were there
// for the claim, so its marks do not call for another.
func (d *Dispatcher) settledClaim(j *job, now time.Time) {
	if len(j.turn.Caps) == 0 {
		return
	}
	for _, c := range j.turn.Caps {
		d.byName[c.Stage].settling = false
	}
	if j.err != nil {
		return
	}
	j.marks = d.marks
	d.claimedMore(j)
	d.handOut(j.res.Claimed, now)
}

// claiming reports whether the claim in flight claims for p.
func (d *Dispatcher) claiming(p *pool) bool {
	if j := d.claimer.job; j != nil {
		for _, c := range j.turn.Caps {
			if c.Stage == p.cfg.Name {
				return true
			}
		}
	}
	return false
}
