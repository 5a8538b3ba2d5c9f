package dispatch

import (
	"cmp"
	"slices"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// startClaim sends the claim lane its work: the wake flag, due paused rows
// back to pending, at a poll the messages pepsi.enqueue() wrote since the
// last one admitted, a claim for every stage that has room and may have
// work.
func (d *Dispatcher) startClaim(now time.Time) {
	l := &d.claimer
	if d.claimHeld() {
		return
	}
	w := &d.waker
	resume := d.checkPause || (!d.nextPaused.IsZero() && !now.Before(d.nextPaused))
	// A resume or a due poll may find work at any stage with room.
	any := resume || w.pollDue(now)
	caps := d.caps[:0]
	d.tokensAt = time.Time{}
	w.backlog = false
	for _, p := range d.pools {
		if p.settling {
			continue // the settle in flight claims for it
		}
		c := p.capacity(now)
		if c == 0 && p.more && !now.Before(p.coolUntil) {
			w.backlog = true // full, with more waiting: its answers wake the loop
		}
		if c > 0 && (p.more || any) {
			if p.rate != nil {
				c = d.rated(p, c, now)
			}
			if c > 0 {
				sc := queue.StageCap{Stage: p.cfg.Name, Cap: c}
				if p.keys != nil {
					sc.KeyLimit, sc.Held = p.cfg.KeyLimit, p.keys.snapshot()
				}
				caps = append(caps, sc)
			}
		}
	}
	d.caps = caps
	if !resume && len(caps) == 0 && d.tokensSoon(now) {
		// Only stages waiting for tokens have room: a poll now would
		// find nothing to claim, and they have work.
		w.hold(now, d.tokensAt)
	}
	if !resume && len(caps) == 0 && !w.needsTurn(now) {
		return
	}
	if !resume && w.write == queue.ArmKeep && d.small(caps, now) {
		// Answers trickle in under load: wait a little for a batch worth a
		// round trip (workers have QUEUE_LIMIT ids each to go on with).
		if d.claimAt.IsZero() {
			d.claimAt = now.Add(claimDelay)
		}
		if now.Before(d.claimAt) {
			return
		}
	}
	d.claimAt = time.Time{}
	j := &l.buf
	j.turn = queue.Turn{Resume: resume, Admit: any, Caps: caps, Stages: d.owned, Set: d.set}
	w.turn(&j.turn)
	j.err, j.gen, j.marks, j.pause = nil, d.wakeGen, d.marks, time.Time{}
	d.checkPause = false
	l.job = j
	l.jobs <- j
}

// claimHeld reports whether the claim lane may not start a job now
// whatever is due: a claim is in flight, the dispatcher is stopping, the
// settles are behind or the last one failed, or the orphan sweep runs.
// Each ends with a lane's result or a stop, which wakes the loop, so
// nextDeadline sets no deadline of the claim's meanwhile (a due one would
// spin the loop).
func (d *Dispatcher) claimHeld() bool {
	// Answers free their workers before they are settled: while the
	// settles fall behind, claiming more only grows their backlog. And the
	// orphan sweep must know every row this dispatcher holds. A settle
	// that failed may have committed: it goes again before any claim, so
	// that no row it moved is handed out first (see queue's settleSQL).
	return d.claimer.job != nil || d.stopping || len(d.settles) > d.backlog || d.sweepingOrphans() || d.settleAgain
}

// claimDelay is how long a claim may wait for its stages to have room
// worth a batch (an eighth of their room).
const claimDelay = 2 * time.Millisecond

// small reports whether caps add up to less than an eighth of the room of
// their stages (a stage's tokens, when they are fewer: waiting would not
// make its cap grow).
func (d *Dispatcher) small(caps []queue.StageCap, now time.Time) bool {
	got, room := 0, 0
	for _, c := range caps {
		got += c.Cap
		room += d.byName[c.Stage].room(now)
	}
	return 8*got < room
}

// finishClaim applies a claim lane's result: resumed rows, what may be
// pending where, and the claimed messages handed to workers.
func (d *Dispatcher) finishClaim(j *job, now time.Time) {
	t, res := &j.turn, &j.res
	if j.err != nil {
		d.checkPause = d.checkPause || t.Resume
		d.waker.failed(t)
		d.dbFailed(now, "claim", j.err)
		return
	}
	d.backoff.reset()
	d.outage.failing = false
	busy := res.Resumed > 0 || len(res.Claimed) > 0 || d.tokensSoon(now)
	d.waker.done(t, res, busy, j.gen != d.wakeGen, now)
	if res.Admitted >= queue.AdmitBatch {
		d.waker.pollAt = now // more wait to be admitted
	}
	d.resumed(j)
	d.claimedMore(j)
	d.handOut(res.Claimed, now)
}

// resumed books the paused rows a claim job put back to pending, and when
// the next fall due.
func (d *Dispatcher) resumed(j *job) {
	t, res := &j.turn, &j.res
	if t.Resume {
		// A settle that paused rows meanwhile may not be in the snapshot.
		d.nextPaused = earliest(res.NextPaused, j.pause)
		if res.Resumed > 0 {
			d.tally.global.Resumed += res.Resumed
			d.tally.dirty = true
		}
	}
	if res.Resumed == 0 {
		return
	}
	for _, p := range d.pools {
		if !slices.ContainsFunc(t.Caps, func(c queue.StageCap) bool { return c.Stage == p.cfg.Name }) {
			d.markMore(p)
		}
	}
}

// claimedMore decides, for each stage claimed for, whether it may have
// more pending rows: it filled its cap, a wake came during the claim, or
// a settle made rows pending there meanwhile.
func (d *Dispatcher) claimedMore(j *job) {
	woken := j.gen != d.wakeGen
	for _, c := range j.turn.Caps {
		got := 0
		for i := range j.res.Claimed {
			if j.res.Claimed[i].Stage == c.Stage {
				got++
			}
		}
		p := d.byName[c.Stage]
		// A keyed stage that filled its cap with keys it had just given
		// back has no key to spare: its next messages come with the
		// settles that free their keys, not from the claim lane.
		fresh := p.keys == nil || p.keys.fresh(j.res.Claimed, c.Stage)
		p.filled = got == c.Cap && fresh
		p.more = p.filled || woken || p.marked > j.marks
	}
}

// handOut gives claimed messages to workers, in (priority, id) order per
// stage; what cannot be handed out goes back.
func (d *Dispatcher) handOut(claimed []queue.Claimed, now time.Time) {
	if len(claimed) == 0 {
		return
	}
	d.tally.global.Claimed += int64(len(claimed))
	d.tally.dirty = true
	d.holdClaimed(claimed)
	slices.SortFunc(claimed, func(a, b queue.Claimed) int {
		return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
	})
	for _, c := range claimed {
		p := d.byName[c.Stage]
		switch {
		case p == nil:
			// Its stage was changed by hand while the claim ran.
			d.settles = append(d.settles, queue.Settle{ID: c.ID, Stage: c.Stage, Verdict: queue.NotRun})
		case d.stopping || d.lockless:
			// Claimed as the lock was lost or a stop began: not handed out.
			d.settles = append(d.settles, queue.Settle{ID: c.ID, Stage: p.cfg.Name, Verdict: queue.NotRun})
		case d.assign(p, c.ID, now):
			d.obs.Handed(p.cfg.Name, time.Duration(c.Waited*float64(time.Second)))
		}
	}
	for _, p := range d.pools {
		for _, w := range p.workers {
			w.flush()
		}
	}
}

// assign hands id to the earliest-started worker with a free slot,
// starting one if none has; a message no worker can take goes back.
func (d *Dispatcher) assign(p *pool, id int64, now time.Time) bool {
	w := p.pick()
	if w == nil && p.live() < p.cfg.Parallelism && !now.Before(p.coolUntil) {
		w = d.spawn(p, now)
	}
	if w == nil {
		d.settles = append(d.settles, queue.Settle{ID: id, Stage: p.cfg.Name, Verdict: queue.NotRun})
		return false
	}
	w.hand(id, now)
	if p.rate != nil {
		p.rate.take(1, now)
	}
	if w.inflight.len() == 1 {
		d.due(now.Add(d.cfg.Dispatch.MaxRuntime))
	}
	if w.handed >= p.cfg.MaxMessages {
		w.draining = true
	}
	return true
}
