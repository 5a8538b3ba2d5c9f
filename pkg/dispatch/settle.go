package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// A settle of fewer than settleWorth verdicts waits up to settleDelay for
// more while answers are still to come: under a steady trickle of answers
// (stages that commit, at a few thousand passes a second) each settle
// would otherwise carry a few, and its round trip, the statement's fixed
// cost in the server and the claim that follows it would be paid per
// message. Answers free their workers' slots when they arrive, so the
// wait holds up no worker; a message's next stage sees it up to
// settleDelay later (the A/B behind the values: docs/performance-log.md).
// A settle with answers of a stage with KEY goes at once: the keys of its
// messages are held until it, and with them the next messages of those
// keys.
const (
	settleWorth = 32
	settleDelay = 3 * time.Millisecond
)

// startSettle sends every verdict gathered so far to the settle lane.
func (d *Dispatcher) startSettle(now time.Time) {
	l := &d.settler
	if l.job != nil || len(d.settles) == 0 {
		return
	}
	if len(d.settles) < settleWorth && !d.stopping && !d.settleNow && d.answersDue() {
		if d.settleAt.IsZero() {
			d.settleAt = now.Add(settleDelay)
		}
		if now.Before(d.settleAt) {
			return
		}
	}
	d.settleAt, d.settleNow = time.Time{}, false
	j := &l.buf
	j.turn = queue.Turn{Settles: d.settles, Stages: d.owned, Set: d.set}
	j.err = nil
	d.settleClaims = d.claimWithSettle(j, now)
	d.settles, d.spare = d.spare[:0], nil
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

// finishSettle applies a settle's result: statistics, stages that got
// pending rows, when paused rows fall due.
func (d *Dispatcher) finishSettle(j *job, now time.Time) {
	t, res := &j.turn, &j.res
	d.settleClaims = false
	if j.err != nil {
		d.settledClaim(j, now)
		d.settles, d.spare = append(t.Settles, d.settles...), d.settles[:0]
		d.settleAgain = true
		d.dbFailed(now, "settle", j.err)
		return
	}
	d.settleAgain = false
	d.dbUp(t.Settles)
	d.spare = t.Settles[:0]
	d.backoff.reset()
	d.releaseSettled(res.Settled)
	for i := range res.Settled {
		s := &res.Settled[i]
		d.tally.settled(s)
		if s.Before == queue.Cancelled {
			if v := settleOf(t.Settles, s.ID); v != nil {
				d.tally.cancelled(v)
			}
		}
		if s.Changed() && s.After == queue.Pending {
			d.movedTo(s)
		}
		if s.After == queue.Paused {
			d.nextPaused = earliest(d.nextPaused, s.Timeout)
			if c := d.claimer.job; c != nil && c.turn.Resume {
				c.pause = earliest(c.pause, s.Timeout)
			}
		}
	}
	d.settledClaim(j, now)
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

// movedTo notes that a settle made s pending at its stage: worth a claim
// there, or, at a stage this dispatcher has no pool for, a warning (once
// per stage): nothing will claim it.
func (d *Dispatcher) movedTo(s *queue.Settled) {
	if p := d.byName[s.Stage]; p != nil {
		d.markMore(p)
		return
	}
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

// markMore says that stage p may have pending rows; a claim in flight
// does not take that back (marks).
func (d *Dispatcher) markMore(p *pool) {
	d.marks++
	p.more, p.marked = true, d.marks
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
