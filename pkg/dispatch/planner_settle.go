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

// verdict adds v to the next settle.
func (p *planner) verdict(v queue.Settle) {
	p.settles = append(p.settles, v)
	if p.traced != nil {
		p.traced(&p.settles[len(p.settles)-1]) // not &v: v would be on the heap, tracing or not
	}
}

// keyedAnswers says that the verdicts gathered hold answers of a stage
// with KEY: the next settle goes at once, to give their keys back.
func (p *planner) keyedAnswers() { p.settleNow = true }

// nextSettle fills t with the settle lane's next turn, if one is called
// for now, and reports whether it did: every verdict gathered so far, and
// the claim of the keyed stages whose keys they free. The settle is in
// flight until settleFailed or settleDone.
func (p *planner) nextSettle(now time.Time, s loopState, t *queue.Turn) bool {
	ok, wait := p.settleGate(now, s)
	if !ok {
		if !wait.IsZero() {
			p.settleAt = wait
		}
		return false
	}
	p.settleAt, p.settleNow = time.Time{}, false
	*t = queue.Turn{Settles: p.settles, Stages: p.owned, Set: p.set, Joins: p.joins, JoinAll: p.joinAll}
	p.joinsSent, p.joins = p.joins, nil
	p.settleClaims = p.claimWithSettle(t, now, s)
	p.sent, p.settleRunning = p.settles, true
	p.settles, p.spare = p.spare[:0], nil
	return true
}

// settleFailed takes back the settle in flight, t: its verdicts go again,
// before any claim (it may have committed).
func (p *planner) settleFailed(t *queue.Turn) {
	p.joins = append(p.joins, p.joinsSent...)
	p.settleEnded(t)
	p.settles, p.spare = append(t.Settles, p.settles...), p.settles[:0]
	p.settleAgain = true
}

// settleDone applies the result of the settle in flight, t: the keys it
// gave back, the stages it made rows pending at, when the rows it paused
// fall due, and what the claim it carried took. The dispatcher hands
// those out.
func (p *planner) settleDone(t *queue.Turn, res *queue.TurnResult) {
	p.settleEnded(t)
	p.settleAgain = false
	p.spare = t.Settles[:0]
	p.releaseSettled(res.Settled)
	for _, j := range res.Joined {
		if st := p.byName[j.Stage]; st != nil && !j.Failed {
			p.markMore(st)
		}
	}
	for i := range res.Settled {
		s := &res.Settled[i]
		if s.Before == queue.Waiting {
			// Its stage moved it to a join itself (pepsi.join): the settle
			// that unhanded it could not know to settle its join too.
			p.joins = append(p.joins, s.ID)
		}
		if s.Requeued() {
			if st := p.byName[s.Stage]; st != nil {
				p.markMore(st)
			}
		}
		if s.After == queue.Paused {
			p.nextPaused = earliest(p.nextPaused, s.Timeout)
			if p.claimRunning && p.claimResume {
				p.claimPause = earliest(p.claimPause, s.Timeout)
			}
		}
	}
	if len(t.Caps) == 0 {
		return
	}
	// The rows this settle made pending at those stages were there for
	// its claim: its marks do not call for another.
	p.claimedMore(t.Caps, res.Claimed, p.settleGen, p.marks)
	p.holdClaimed(res.Claimed)
}

// settleEnded notes that the settle in flight, t, is over.
func (p *planner) settleEnded(t *queue.Turn) {
	p.settleRunning, p.settleClaims, p.sent, p.joinsSent = false, false, nil, nil
	for _, c := range t.Caps {
		p.byName[c.Stage].settling = false
	}
}

// releaseSettled gives back the keys of settled messages; their stage may
// have more to claim.
func (p *planner) releaseSettled(settled []queue.Settled) {
	if !p.keyed {
		return
	}
	for i := range settled {
		s := &settled[i]
		if st := p.byName[s.Handed]; st != nil && st.keys != nil && st.keys.release(s.ID) {
			p.markMore(st)
		}
	}
}

// A settle that frees keys carries the claim of their stages: the claim
// runs after the settle in its transaction, so the next message of each
// freed key is taken in the same round trip and commit that freed it. A
// key's messages pass one at a time, so that round trip, not the database,
// sets a hot key's pace. A stage is claimed for by one turn at a time (its
// caps and held keys are the planner's whole view of it): the settle
// takes only stages the claim in flight does not, and the claim lane skips
// the stages the settle took, so other stages' claims go on beside it.
// Stages with RATE are left to the claim lane, which books their tokens,
// and so are stages whose last claim took its whole cap with a key it had
// not just given back (filled): their keys are many, a freed key is one of
// plenty to take, and the claim lane's claim goes beside the settle
// without waiting for its commit.

// claimWithSettle adds to the settle t a claim for each keyed stage whose
// keys it frees, with the held keys less those; it returns whether it did.
func (p *planner) claimWithSettle(t *queue.Turn, now time.Time, s loopState) bool {
	if !p.keyed || s.stopping || s.lockless || p.settleAgain || s.sweeping {
		return false
	}
	caps := p.settleCaps[:0]
	for _, st := range p.stages {
		if st.keys == nil || st.rate != nil || st.filled || p.claimingFor(st) {
			continue
		}
		freed := st.keys.freeing(t.Settles, st.cfg.Name)
		if freed == 0 {
			continue
		}
		if c := st.slots.capacity(now); c > 0 {
			caps = append(caps, queue.StageCap{Stage: st.cfg.Name, Cap: c, KeyLimit: st.cfg.KeyLimit, Held: st.keys.snapshotLess()})
			st.settling = true
		}
	}
	p.settleCaps = caps
	if len(caps) == 0 {
		return false
	}
	t.Caps = caps
	p.settleGen, p.settleMarks = p.wakeGen, p.marks
	return true
}

// claimingFor reports whether the claim in flight claims for st.
func (p *planner) claimingFor(st *stagePlan) bool {
	if !p.claimRunning {
		return false
	}
	for _, c := range p.caps {
		if c.Stage == st.cfg.Name {
			return true
		}
	}
	return false
}

// held appends to ids the ids of the verdicts not yet settled: gathered,
// and in the settle in flight.
func (p *planner) held(ids []int64) []int64 {
	for _, s := range p.settles {
		ids = append(ids, s.ID)
	}
	for _, s := range p.sent {
		ids = append(ids, s.ID)
	}
	return ids
}

// unsettled counts the verdicts gathered for the next settle.
func (p *planner) unsettled() int { return len(p.settles) }

// inFlight counts the verdicts of the settle in flight.
func (p *planner) inFlight() int { return len(p.sent) }

// claimInFlight reports whether a claim is in flight, on the claim lane or
// carried by the settle in flight.
func (p *planner) claimInFlight() bool { return p.claimRunning || p.settleClaims }

// notRunCrashes turns the verdicts gathered for the messages of crashes,
// crashed passes the database went down under, into verdicts that put
// them back, and forgets them.
func (p *planner) notRunCrashes(crashes map[int64]struct{}) {
	for i := range p.settles {
		s := &p.settles[i]
		if _, ok := crashes[s.ID]; ok && s.Verdict == queue.PassFailed {
			*s = notRun(pass{s.ID, s.Pass, s.Parent}, s.Stage)
			delete(crashes, s.ID)
		}
	}
}
