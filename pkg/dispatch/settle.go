package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// startSettle sends the settle lane the planner's next settle, if it has
// one: every verdict gathered so far.
func (d *Dispatcher) startSettle(now time.Time) {
	l := &d.settler
	if l.job != nil {
		return
	}
	j := &l.buf
	if !d.plan.nextSettle(now, d.loopState(), &j.turn) {
		return
	}
	if len(j.turn.Caps) > 0 {
		j.turn.Pass = d.passes.Next()
	}
	j.err = nil
	l.job = j
	l.jobs <- j
}

// answersDue reports whether some worker has messages in flight, whose
// answers are still to come.
func (d *Dispatcher) answersDue() bool {
	for _, p := range d.pools {
		for _, w := range p.workers {
			if w.inflight.len() > 0 {
				return true
			}
		}
	}
	return false
}

// finishSettle applies a settle's result: the planner's view, the
// statistics, stages nobody claims for, and what the claim it carried
// took, handed to workers.
func (d *Dispatcher) finishSettle(j *job, now time.Time) {
	t, res := &j.turn, &j.res
	if j.err != nil {
		d.plan.settleFailed(t)
		d.dbFailed(now, "settle", j.err)
		return
	}
	d.dbUp(t.Settles)
	d.backoff.reset()
	for i := range res.Settled {
		s := &res.Settled[i]
		d.tally.settled(s)
		if s.Outcome == queue.OutCancelled {
			if v := settleOf(t.Settles, s.ID); v != nil {
				d.tally.cancelled(v)
			}
		}
		if s.Requeued() && d.byName[s.Stage] == nil {
			d.unclaimed(s)
		}
	}
	d.tally.joined(res.Joined)
	d.plan.settleDone(t, res)
	if len(t.Caps) > 0 {
		d.handOut(res.Claimed, now)
	}
}

// settleOf returns the verdict of id in vs, or nil: a linear search, for
// the rare settle that found its message cancelled.
func settleOf(vs []queue.Settle, id int64) *queue.Settle {
	for i := range vs {
		if vs[i].ID == id {
			return &vs[i]
		}
	}
	return nil
}

// unclaimed warns (once per stage) that a settle made s pending at a
// stage this dispatcher has no pool for: nothing will claim it, unless
// another dispatcher owns the stage.
func (d *Dispatcher) unclaimed(s *queue.Settled) {
	if d.foreign[s.Stage] {
		return // its owner was woken by the settle (queue.Turn.Stages)
	}
	if d.unknown == nil {
		d.unknown = make(map[string]bool)
	}
	if !d.unknown[s.Stage] {
		d.unknown[s.Stage] = true
		d.log.Warn("message moved to a stage no [stage-NAME] section configures; it waits there",
			"stage", s.Stage, "id", s.ID, "from", s.Handed)
	}
}
