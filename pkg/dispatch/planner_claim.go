package dispatch

import (
	"slices"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// claimDelay is how long a claim may wait for its stages to have room
// worth a batch (an eighth of their room).
const claimDelay = 2 * time.Millisecond

// nextClaim fills t with the claim lane's next turn, if one is called for
// now, and reports whether it did: the wake flag, due paused rows back to
// pending, at a poll the messages pepsi.enqueue() wrote since the last one
// admitted, a claim for every stage that has room and may have work. The
// claim is in flight until claimFailed or claimDone.
func (p *planner) nextClaim(now time.Time, s loopState, t *queue.Turn) bool {
	if held, _ := p.claimGate(now, s); held {
		return false
	}
	w := &p.waker
	resume := p.checkPause || (!p.nextPaused.IsZero() && !now.Before(p.nextPaused))
	// A resume or a due poll may find work at any stage with room.
	any := resume || w.pollDue(now)
	caps := p.caps[:0]
	p.tokensAt = time.Time{}
	w.backlog = false
	for _, st := range p.stages {
		if st.settling {
			continue // the settle in flight claims for it
		}
		c := st.slots.capacity(now)
		if c == 0 && st.more && !st.slots.coolingDown(now) {
			w.backlog = true // full, with more waiting: its answers wake the loop
		}
		if c > 0 && (st.more || any) {
			if st.rate != nil {
				c = p.rated(st, c, now)
			}
			if c > 0 {
				sc := queue.StageCap{Stage: st.cfg.Name, Cap: c}
				if st.keys != nil {
					sc.KeyLimit, sc.Held = st.cfg.KeyLimit, st.keys.snapshot()
				}
				caps = append(caps, sc)
			}
		}
	}
	p.caps = caps
	if !resume && len(caps) == 0 && p.tokensSoon(now) {
		// Only stages waiting for tokens have room: a poll now would
		// find nothing to claim, and they have work.
		w.hold(now, p.tokensAt)
	}
	if !resume && len(caps) == 0 && !w.needsTurn(now) {
		return false
	}
	if !resume && w.write == queue.ArmKeep && p.small(caps, now) {
		// Answers trickle in under load: wait a little for a batch worth a
		// round trip (workers have QUEUE_LIMIT ids each to go on with).
		if p.claimAt.IsZero() {
			p.claimAt = now.Add(claimDelay)
		}
		if now.Before(p.claimAt) {
			return false
		}
	}
	p.claimAt = time.Time{}
	*t = queue.Turn{Resume: resume, Admit: any, Caps: caps, Stages: p.owned, Set: p.set}
	w.turn(t)
	p.claimRunning, p.claimGen, p.claimMarks, p.claimPause, p.claimResume = true, p.wakeGen, p.marks, time.Time{}, resume
	p.checkPause = false
	return true
}

// small reports whether caps add up to less than an eighth of the room of
// their stages (a stage's tokens, when they are fewer: waiting would not
// make its cap grow).
func (p *planner) small(caps []queue.StageCap, now time.Time) bool {
	got, room := 0, 0
	for _, c := range caps {
		got += c.Cap
		room += p.byName[c.Stage].room(now)
	}
	return 8*got < room
}

// claimFailed takes back what the claim in flight, t, was to do.
func (p *planner) claimFailed(t *queue.Turn) {
	p.claimRunning = false
	p.checkPause = p.checkPause || t.Resume
	p.waker.failed(t)
}

// claimDone applies the result of the claim in flight, t: the wake mode,
// when paused rows fall due, which stages may have more, the keys of the
// messages claimed. The dispatcher hands those out.
func (p *planner) claimDone(t *queue.Turn, res *queue.TurnResult, now time.Time) {
	p.claimRunning = false
	busy := res.Resumed > 0 || len(res.Claimed) > 0 || p.tokensSoon(now)
	p.waker.done(t, res, busy, p.claimGen != p.wakeGen, now)
	if res.Admitted >= queue.AdmitBatch {
		p.waker.pollAt = now // more wait to be admitted
	}
	p.resumed(t, res)
	p.claimedMore(t.Caps, res.Claimed, p.claimGen, p.claimMarks)
	p.holdClaimed(res.Claimed)
}

// resumed notes when the next paused rows fall due after a claim t that
// resumed them, and marks worth a claim the stages it did not claim for
// when it put rows back to pending.
func (p *planner) resumed(t *queue.Turn, res *queue.TurnResult) {
	if t.Resume {
		// A settle that paused rows meanwhile may not be in the snapshot.
		p.nextPaused = earliest(res.NextPaused, p.claimPause)
	}
	if res.Resumed == 0 {
		return
	}
	for _, st := range p.stages {
		if !slices.ContainsFunc(t.Caps, func(c queue.StageCap) bool { return c.Stage == st.cfg.Name }) {
			p.markMore(st)
		}
	}
}

// claimedMore decides, for each stage claimed for (caps, started at wake
// generation gen and marks), whether it may have more pending rows: it
// filled its cap, a wake came during the claim, or a settle made rows
// pending there meanwhile.
func (p *planner) claimedMore(caps []queue.StageCap, claimed []queue.Claimed, gen, marks uint64) {
	woken := gen != p.wakeGen
	for _, c := range caps {
		got := 0
		for i := range claimed {
			if claimed[i].Stage == c.Stage {
				got++
			}
		}
		st := p.byName[c.Stage]
		// A keyed stage that filled its cap with keys it had just given
		// back has no key to spare: its next messages come with the
		// settles that free their keys, not from the claim lane.
		fresh := st.keys == nil || st.keys.fresh(claimed, c.Stage)
		st.filled = got == c.Cap && fresh
		st.more = st.filled || woken || st.marked > marks
	}
}

// holdClaimed books the keys of claimed messages at stages with KEY.
func (p *planner) holdClaimed(claimed []queue.Claimed) {
	if !p.keyed {
		return
	}
	for i := range claimed {
		c := &claimed[i]
		if !c.Keyed {
			continue
		}
		if st := p.byName[c.Stage]; st != nil && st.keys != nil {
			st.keys.hold(c.ID, c.Key)
		}
	}
}
