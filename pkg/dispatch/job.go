package dispatch

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// job is one queue turn handed to the queue goroutine, and its result.
type job struct {
	turn queue.Turn
	res  queue.TurnResult
	err  error
	gen  uint64 // wakeGen when it was started
}

// runJobs executes jobs one at a time until jobs is closed.
func (d *Dispatcher) runJobs() {
	for j := range d.jobs {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		j.err = d.db.RunTurn(ctx, j.turn, &j.res)
		cancel()
		d.results <- j
	}
}

// startJob hands the queue work gathered so far to the queue goroutine:
// resume due paused rows, settle every verdict, claim for every stage that
// has room and may have work.
func (d *Dispatcher) startJob(now time.Time) {
	w := &d.waker
	resume := !d.stopping && (d.checkPause || (!d.nextPaused.IsZero() && !now.Before(d.nextPaused)))
	caps := d.caps[:0]
	if !d.stopping {
		// Settled rows may be requeued to any stage: worth a claim there
		// too; so is every stage with room when a poll is due.
		any := len(d.settles) > 0 || resume || w.pollDue(now)
		for _, p := range d.pools {
			if c := p.capacity(now); c > 0 && (p.more || any) {
				caps = append(caps, queue.StageCap{Stage: p.cfg.Name, Cap: c})
			}
		}
	}
	d.caps = caps
	busy := resume || len(d.settles) > 0 || len(caps) > 0
	if !busy && (d.stopping || !w.needsTurn(now, false)) {
		return
	}
	j := &d.jobBuf
	j.turn = queue.Turn{Resume: resume, Settles: d.settles, Caps: caps}
	if !d.stopping {
		w.turn(&j.turn)
	}
	j.err, j.gen = nil, d.wakeGen
	d.settles, d.spare = d.spare[:0], nil
	d.checkPause = false
	d.job = j
	d.jobs <- j
}

// finishJob applies a job's result: statistics, what may be pending where,
// and the claimed messages handed to workers.
func (d *Dispatcher) finishJob(j *job, now time.Time) {
	d.job = nil
	t, res := &j.turn, &j.res
	if j.err != nil {
		d.settles, d.spare = append(t.Settles, d.settles...), d.settles[:0]
		d.checkPause = d.checkPause || t.Resume
		d.waker.failed(t)
		d.dbFailed(now, "queue turn", j.err)
		return
	}
	d.spare = t.Settles[:0]
	d.backoff = 0
	woken := j.gen != d.wakeGen
	d.waker.done(t, res, len(t.Settles) > 0 || res.Resumed > 0 || len(res.Claimed) > 0, now)
	if t.Resume {
		d.nextPaused = res.NextPaused
		if res.Resumed > 0 {
			d.tally.global.Resumed += res.Resumed
			d.tally.dirty = true
		}
	}
	claimedFrom := func(stage string) (int, bool) {
		for _, c := range t.Caps {
			if c.Stage == stage {
				return c.Cap, true
			}
		}
		return 0, false
	}
	for i := range res.Settled {
		s := &res.Settled[i]
		d.tally.settled(s)
		if s.Set == queue.Pending {
			if p := d.byName[s.Stage]; p != nil {
				if _, ok := claimedFrom(s.Stage); !ok {
					p.more = true
				}
			}
		}
		paused := s.Set == queue.Paused || (s.Set == "" && s.Status == queue.Paused)
		if paused && (d.nextPaused.IsZero() || s.Timeout.Before(d.nextPaused)) {
			d.nextPaused = s.Timeout
		}
	}
	if res.Resumed > 0 {
		for _, p := range d.pools {
			if _, ok := claimedFrom(p.cfg.Name); !ok {
				p.more = true
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
		d.byName[c.Stage].more = got == c.Cap || woken
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
