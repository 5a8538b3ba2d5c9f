package dispatch

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// lane is a queue goroutine and the job it has in flight. The claim lane
// writes the wake flag, resumes due paused rows and claims; the settle
// lane settles answers. They run side by side, each on a connection and
// so a server backend of its own: they touch disjoint rows (a claim takes
// pending rows, a settle running ones), and while the database settles one
// batch it claims the next instead of waiting for it.
type lane struct {
	jobs chan *job
	job  *job // in flight, if any
	buf  job
}

// job is one queue turn handed to a lane, and its result.
type job struct {
	lane  *lane
	turn  queue.Turn
	res   queue.TurnResult
	err   error
	gen   uint64    // claims: wakeGen when it was started
	marks uint64    // claims: marks when it was started
	pause time.Time // claims with Resume: the earliest pause a settle reported meanwhile
}

// runJobs executes l's jobs one at a time until its channel is closed.
func (d *Dispatcher) runJobs(l *lane) {
	for j := range l.jobs {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		j.err = d.db.RunTurn(ctx, j.turn, &j.res)
		cancel()
		d.results <- j
	}
}

// busy reports whether a lane has a job in flight.
func (d *Dispatcher) busy() bool { return d.claimer.job != nil || d.settler.job != nil }

// startJobs hands the queue work gathered so far to the lanes that are free.
func (d *Dispatcher) startJobs(now time.Time) {
	d.startSettle()
	d.startClaim(now)
}

// startSettle sends every verdict gathered so far to the settle lane.
func (d *Dispatcher) startSettle() {
	l := &d.settler
	if l.job != nil || len(d.settles) == 0 {
		return
	}
	j := &l.buf
	j.turn = queue.Turn{Settles: d.settles}
	j.err = nil
	d.settles, d.spare = d.spare[:0], nil
	l.job = j
	l.jobs <- j
}

// startClaim sends the claim lane its work: the wake flag, due paused rows
// back to pending, a claim for every stage that has room and may have work.
func (d *Dispatcher) startClaim(now time.Time) {
	l := &d.claimer
	if l.job != nil || d.stopping || len(d.settles) > d.backlog {
		// Answers free their workers before they are settled: while the
		// settles fall behind, claiming more only grows their backlog.
		return
	}
	w := &d.waker
	resume := d.checkPause || (!d.nextPaused.IsZero() && !now.Before(d.nextPaused))
	// A resume or a due poll may find work at any stage with room.
	any := resume || w.pollDue(now)
	caps := d.caps[:0]
	for _, p := range d.pools {
		if c := p.capacity(now); c > 0 && (p.more || any) {
			caps = append(caps, queue.StageCap{Stage: p.cfg.Name, Cap: c})
		}
	}
	d.caps = caps
	if !resume && len(caps) == 0 && !w.needsTurn(now) {
		return
	}
	if !resume && w.write == queue.ArmKeep && d.small(caps) {
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
	j.turn = queue.Turn{Resume: resume, Caps: caps}
	w.turn(&j.turn)
	j.err, j.gen, j.marks, j.pause = nil, d.wakeGen, d.marks, time.Time{}
	d.checkPause = false
	l.job = j
	l.jobs <- j
}

// claimDelay is how long a claim may wait for its stages to have room
// worth a batch (an eighth of their room).
const claimDelay = 2 * time.Millisecond

// small reports whether caps add up to less than an eighth of the room of
// their stages.
func (d *Dispatcher) small(caps []queue.StageCap) bool {
	got, room := 0, 0
	for _, c := range caps {
		p := d.byName[c.Stage]
		got += c.Cap
		room += p.cfg.Parallelism * p.cfg.QueueLimit
	}
	return 8*got < room
}

// finishJob applies a job's result.
func (d *Dispatcher) finishJob(j *job, now time.Time) {
	j.lane.job = nil
	if j.lane == &d.settler {
		d.finishSettle(j, now)
	} else {
		d.finishClaim(j, now)
	}
}

// markMore says that stage p may have pending rows; a claim in flight
// does not take that back (marks).
func (d *Dispatcher) markMore(p *pool) {
	d.marks++
	p.more, p.marked = true, d.marks
}

// finishSettle applies a settle's result: statistics, stages that got
// pending rows, when paused rows fall due.
func (d *Dispatcher) finishSettle(j *job, now time.Time) {
	t, res := &j.turn, &j.res
	if j.err != nil {
		d.settles, d.spare = append(t.Settles, d.settles...), d.settles[:0]
		d.dbFailed(now, "settle", j.err)
		return
	}
	d.spare = t.Settles[:0]
	d.backoff = 0
	for i := range res.Settled {
		s := &res.Settled[i]
		d.tally.settled(s)
		if s.Set == queue.Pending {
			if p := d.byName[s.Stage]; p != nil {
				d.markMore(p)
			}
		}
		paused := s.Set == queue.Paused || (s.Set == "" && s.Status == queue.Paused)
		if paused {
			d.nextPaused = earliest(d.nextPaused, s.Timeout)
			if c := d.claimer.job; c != nil && c.turn.Resume {
				c.pause = earliest(c.pause, s.Timeout)
			}
		}
	}
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
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
	d.backoff = 0
	woken := j.gen != d.wakeGen
	d.waker.done(t, res, res.Resumed > 0 || len(res.Claimed) > 0, now)
	if t.Resume {
		// A settle that paused rows meanwhile may not be in the snapshot.
		d.nextPaused = earliest(res.NextPaused, j.pause)
		if res.Resumed > 0 {
			d.tally.global.Resumed += res.Resumed
			d.tally.dirty = true
		}
	}
	claimedFrom := func(stage string) bool {
		for _, c := range t.Caps {
			if c.Stage == stage {
				return true
			}
		}
		return false
	}
	if res.Resumed > 0 {
		for _, p := range d.pools {
			if !claimedFrom(p.cfg.Name) {
				d.markMore(p)
			}
		}
	}
	claimed := res.Claimed
	for _, c := range t.Caps {
		got := 0
		for i := range claimed {
			if claimed[i].Stage == c.Stage {
				got++
			}
		}
		p := d.byName[c.Stage]
		p.more = got == c.Cap || woken || p.marked > j.marks
	}
	if len(claimed) == 0 {
		return
	}
	d.tally.global.Claimed += int64(len(claimed))
	d.tally.dirty = true
	slices.SortFunc(claimed, func(a, b queue.Claimed) int {
		return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.ID, b.ID))
	})
	for _, c := range claimed {
		p := d.byName[c.Stage]
		if p == nil {
			// Its stage was changed by hand while the claim ran.
			d.settles = append(d.settles, queue.Settle{ID: c.ID, Stage: c.Stage, Verdict: queue.Requeue})
			continue
		}
		if d.stopping || d.lockless {
			// Claimed as the lock was lost: not handed out.
			d.settles = append(d.settles, queue.Settle{ID: c.ID, Stage: p.cfg.Name, Verdict: queue.Requeue})
			continue
		}
		if d.assign(p, c.ID, now) {
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
		d.settles = append(d.settles, queue.Settle{ID: id, Stage: p.cfg.Name, Verdict: queue.Requeue})
		return false
	}
	w.hand(id, now)
	if w.inflight.len() == 1 {
		d.due(now.Add(d.cfg.Dispatch.MaxRuntime))
	}
	if w.handed >= p.cfg.MaxMessages {
		w.draining = true
	}
	return true
}

// settleNow settles the gathered verdicts at once, on stopping.
func (d *Dispatcher) settleNow(ctx context.Context) error {
	if len(d.settles) == 0 {
		return nil
	}
	settled, err := d.db.Settle(ctx, d.settles, nil)
	if err != nil {
		return err
	}
	for i := range settled {
		d.tally.settled(&settled[i])
	}
	d.settles = d.settles[:0]
	return nil
}
