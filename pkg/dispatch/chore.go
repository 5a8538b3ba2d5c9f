package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// A chore is the chore lane's job: the steps due of the orphan sweep, the
// retention sweep and the statistics flush, and on stopping the last
// flush and clearing the wake flag. Its steps run in that order; the first
// that fails ends it.
type chore struct {
	want, did step // what was asked, what was done

	held    []int64            // orphans: the ids this dispatcher holds
	age     time.Duration      // orphans: reset only rows running longer than this
	after   queue.ExpireAt     // expire: where the step starts
	keep    time.Duration      // expire: delete done rows older than this (RETENTION)
	width   time.Duration      // expire: the span of each range of done rows
	ids     int64              // expire: the ids of each range of messages (0: as the last one)
	flushes []queue.StatsFlush // flush: the statistics writes to apply
	final   bool               // the last chore before the dispatcher stops
	owned   []string           // orphans: the stages swept (nil: every one)
	set     string             // disarm: the dispatcher's wake row

	reset     int64          // orphans: rows put back to pending
	last      queue.ExpireAt // expire: where the next step starts
	more      bool           // expire: a next step has work
	expired   int64          // expire: rows deleted
	ranges    int            // expire: ranges of done rows created
	seq       int64          // expire: the message id sequence's value at the walk's start
	retired   int            // expire: ranges of messages dropped at the walk's end
	moved     int64          // expire: messages moved out of them
	retireErr error          // expire: why they were not
}

// step is one part of a chore.
type step uint8

const (
	stepOrphans step = 1 << iota // reset running rows no worker holds
	stepExpire                   // create ranges of done rows ahead, delete one batch of expired ones
	stepFlush                    // add the statistics deltas
	stepDisarm                   // clear the wake flag: no one listens now
)

// what names the first step of want that was not done, for a log line.
func (c *chore) what() string {
	switch missed := c.want &^ c.did; {
	case missed&stepOrphans != 0:
		return "orphan sweep"
	case missed&stepExpire != 0:
		return "retention sweep"
	case missed&stepFlush != 0:
		return "writing statistics"
	default:
		return "clearing the wake flag"
	}
}

// run does the chore's steps on db; it runs on the chore lane.
func (c *chore) run(ctx context.Context, db *queue.DB) error {
	var err error
	if c.want&stepOrphans != 0 {
		if c.reset, err = db.ResetOrphans(ctx, c.held, c.age, c.owned...); err != nil {
			return err
		}
		c.did |= stepOrphans
	}
	if c.want&stepExpire != 0 {
		if c.after == (queue.ExpireAt{}) {
			// A walk starts with the ranges the next steps' settles need.
			if c.ranges, err = db.DoneAhead(ctx, c.width, doneAhead); err != nil {
				return err
			}
			if _, c.seq, err = db.MessageAhead(ctx, c.ids, messageAhead); err != nil {
				return err
			}
		}
		if c.last, c.expired, c.more, err = db.ExpireDone(ctx, c.after, c.keep, expireBatch); err != nil {
			return err
		}
		c.did |= stepExpire
		if !c.more {
			// The walk's end: the ranges of messages it emptied go. The
			// step's deletions are done and booked whatever this does: a
			// range not dropped now is dropped at the next walk's end.
			c.retired, c.moved, c.retireErr = db.RetireMessages(ctx, retireLeft, retireMost)
		}
	}
	if c.want&stepFlush != 0 {
		if err = db.AddStatsOnce(ctx, c.flushes); err != nil {
			return err
		}
		c.did |= stepFlush
	}
	if c.want&stepDisarm != 0 {
		if err = db.SetArmed(ctx, c.set, false); err != nil {
			return err
		}
		c.did |= stepDisarm
	}
	return nil
}

// expireBatch is how many rows, by id, one retention step looks at.
const expireBatch = 5000

// doneAhead is how many ranges of done rows, past now, the retention
// sweep keeps created; it runs once a range's span, so a row a settle
// makes done finds its range made although one sweep failed.
const doneAhead = 3

// messageAhead is how many ranges of message ids, past the sequence, the
// retention sweep keeps created; each holds about the ids of one span of
// done rows (doneWidth), so a sweep that failed leaves two to go.
const messageAhead = 3

// retireLeft is how many of a range's messages may be unfinished (or
// retained) when it is retired: they move to the default partition, as a
// failed message kept until it is purged would otherwise hold its range.
const retireLeft = 100

// retireMost is how many ranges of messages one sweep retires at most.
const retireMost = 4

// doneWidth is the span of each range of done rows for a RETENTION of
// keep: a quarter of it, at least a second, so that a done message is
// deleted between keep and keep + 2 spans (its range's end, and the next
// sweep) after it was done, and about 5 + 3 ranges exist at a time.
func doneWidth(keep time.Duration) time.Duration {
	return max(keep/4, time.Second).Truncate(time.Second)
}

// startChore starts the chore lane's next chore, if one is due.
func (d *Dispatcher) startChore(now time.Time) {
	l := &d.chores
	if l.job != nil {
		return
	}
	j := &l.buf
	c := &j.chore
	*c = chore{held: c.held[:0], flushes: c.flushes, owned: d.owned, set: d.set}
	if d.stopping {
		if !d.readyToWrapUp() {
			return
		}
		c.final = true
		if !d.lockless {
			c.want |= stepDisarm
		}
	} else if !d.lockless {
		// Without the lock the rows may be another dispatcher's by now:
		// only the statistics are written.
		d.sweepsDue(c, now)
	}
	if d.tally.pending() && (c.final || d.flushDue(now)) {
		c.want |= stepFlush
		c.flushes = d.tally.flushes(c.flushes)
	}
	if c.want == 0 {
		d.wrapped = d.wrapped || c.final
		return
	}
	j.err = nil
	l.job = j
	l.jobs <- j
}

// sweepsDue puts into c the sweeps that are due. The orphan sweep waits
// for the claims to be idle (a settle may carry one), and the claim lane waits for it: it must
// know every row this dispatcher holds.
func (d *Dispatcher) sweepsDue(c *chore, now time.Time) {
	dc := &d.cfg.Dispatch
	if d.claimer.job == nil && !d.settleClaims && (d.orphansNow || !now.Before(d.nextOrphans)) {
		c.want |= stepOrphans
		c.held, c.age = d.held(c.held), dc.OrphanSweep
		if d.orphansNow {
			c.age = 0
		}
	}
	if dc.Retention > 0 && (d.expiring || !now.Before(d.nextExpire)) && d.janitor.Load() {
		c.want |= stepExpire
		c.after, c.keep, c.width = d.expireAfter, dc.Retention, doneWidth(dc.Retention)
		c.ids = int64(d.idRate * c.width.Seconds())
	}
}

// sweepingOrphans reports whether an orphan sweep is in flight.
func (d *Dispatcher) sweepingOrphans() bool {
	j := d.chores.job
	return j != nil && j.chore.want&stepOrphans != 0
}

// finishChore applies what a chore did, and retries what it did not.
func (d *Dispatcher) finishChore(j *job, now time.Time) {
	c := &j.chore
	dc := &d.cfg.Dispatch
	if c.did&stepOrphans != 0 {
		d.orphansNow, d.nextOrphans = false, now.Add(dc.OrphanSweep)
		if c.reset > 0 {
			d.log.Warn("reset running rows no worker holds", "count", c.reset)
			d.tally.global.Orphans += c.reset
			d.tally.dirty = true
			d.obs.OrphansRescued(c.reset)
			d.woken()
		}
	}
	if c.did&stepExpire != 0 {
		d.expired(c, now)
	}
	if c.want&stepFlush != 0 {
		d.tally.flushed(c.flushes, c.did&stepFlush != 0)
		if c.did&stepFlush != 0 {
			d.lastFlush = now
		}
	}
	if j.err != nil {
		d.dbFailed(now, c.what(), j.err)
		return
	}
	d.backoff.reset()
	d.wrapped = d.wrapped || c.final
}

// expired books one retention step; the walk goes on until a step finds
// no more rows.
func (d *Dispatcher) expired(c *chore, now time.Time) {
	dc := &d.cfg.Dispatch
	d.expiring, d.expireAfter = c.more, c.last
	if !c.more {
		d.expireAfter = queue.ExpireAt{}
	}
	if c.ranges > 0 {
		d.log.Debug("retention: ranges of done messages created", "count", c.ranges, "span", doneWidth(dc.Retention))
	}
	if c.after == (queue.ExpireAt{}) {
		// The walk's start read the id sequence: the ids drawn since the
		// last one's size the next ranges of messages.
		if !d.idSeqAt.IsZero() && c.seq >= d.idSeq && now.After(d.idSeqAt) {
			d.idRate, d.idRated = float64(c.seq-d.idSeq)/now.Sub(d.idSeqAt).Seconds(), true
		}
		d.idSeq, d.idSeqAt = c.seq, now
	}
	if c.retired > 0 {
		d.log.Debug("retention: ranges of messages dropped", "count", c.retired, "moved", c.moved)
	}
	if c.retireErr != nil {
		d.log.Warn("retention: ranges of messages not dropped; retrying at the next sweep", "err", c.retireErr)
	}
	d.expiredRows += c.expired
	if c.expired > 0 {
		d.tally.global.Expired += c.expired
		d.tally.dirty = true
	}
	if d.expiring {
		return
	}
	if d.expiredRows > 0 {
		d.log.Info("retention: deleted done messages", "count", d.expiredRows, "older_than", dc.Retention)
	}
	d.expiredRows = 0
	d.nextExpire = now.Add(min(doneWidth(dc.Retention), time.Hour))
	if !d.idRated {
		// A second walk soon measures the rate the first could not.
		d.nextExpire = now.Add(min(doneWidth(dc.Retention), time.Second))
	}
}

// held appends to ids the ids this dispatcher has claimed and not yet
// settled.
func (d *Dispatcher) held(ids []int64) []int64 {
	for _, s := range d.settles {
		ids = append(ids, s.ID)
	}
	if j := d.settler.job; j != nil {
		for _, s := range j.turn.Settles {
			ids = append(ids, s.ID)
		}
	}
	for _, p := range d.pools {
		for _, w := range p.workers {
			ids = append(ids, w.inflight.ids[w.inflight.head:]...)
		}
	}
	return ids
}

// flushDue reports whether the statistics should be written now: every
// STATS_INTERVAL, or when the pipeline went idle (at most once per
// idleFlushGap).
func (d *Dispatcher) flushDue(now time.Time) bool {
	return d.tally.dirty && (!now.Before(d.lastFlush.Add(d.cfg.Dispatch.StatsInterval)) ||
		(!now.Before(d.lastFlush.Add(idleFlushGap)) && d.idle()))
}
