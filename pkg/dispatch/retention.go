package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// retention is the janitor's retention sweep. Every quarter of RETENTION
// (at least a second, at most an hour) it walks the done rows, deleting
// the messages done longer than RETENTION ago a batch at a time. A walk
// starts by creating the ranges of done rows and of message ids ahead of
// use, and ends by dropping the ranges of messages it emptied: they lock
// the tables the deletions lock, so they alternate with them on the
// service's one goroutine (see docs/design.md, "Where messages are").
type retention struct {
	startStop
	store  retentionStore
	log    *slog.Logger
	now    func() time.Time
	keep   time.Duration        // RETENTION
	retry  backoff              // the wait after a failed batch
	report chan<- serviceReport // the messages deleted, the batches that failed
	ids    idRate
	// ddl is held for each batch, and by the analyze check for each
	// ANALYZE (nil: none): a range created or dropped waits for an ACCESS
	// EXCLUSIVE lock that an ANALYZE of its table would keep from it, and
	// the settles queue behind that wait.
	ddl *sync.Mutex
}

// expireBatch is how many rows, by id, one retention batch looks at.
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

// Start begins a walk at once, and another a span after each, until Stop.
func (r *retention) Start(ctx context.Context) error {
	r.start(ctx, r.run)
	return nil
}

// run walks until stop. A batch runs under ctx: a Stop lets the batch in
// flight finish, so that what it deleted is counted.
func (r *retention) run(ctx, stop context.Context) {
	for {
		next, ok := r.walk(ctx, stop)
		if !ok || !sleep(stop, next) {
			return
		}
	}
}

// walk deletes batches until one finds no more rows, trying a failed
// batch again after a backoff. It returns the wait before the next walk, or
// false when it was stopped.
func (r *retention) walk(ctx, stop context.Context) (time.Duration, bool) {
	var at queue.ExpireAt
	var deleted int64
	for {
		next, n, more, err := r.deleteBatch(ctx, at)
		if err != nil {
			if ctx.Err() != nil {
				return 0, false // the dispatcher gave up on the database
			}
			wait := r.retry.next()
			logRetry(r.log, "retention sweep", err, wait)
			r.send(ctx, serviceReport{err: err})
			if !sleep(stop, wait) {
				return 0, false
			}
			continue
		}
		r.retry.reset()
		deleted += n
		if !more {
			break
		}
		if stop.Err() != nil {
			return 0, false
		}
		at = next
	}
	if deleted > 0 {
		r.log.Info("retention: deleted done messages", "count", deleted, "older_than", r.keep)
	}
	if !r.ids.rated {
		// A second walk soon measures the rate the first could not.
		return min(doneWidth(r.keep), time.Second), true
	}
	return min(doneWidth(r.keep), time.Hour), true
}

// deleteBatch deletes one batch of expired messages from at (a walk's
// start when zero), and reports how many to the loop. It returns where
// the next batch goes on and whether it has work.
func (r *retention) deleteBatch(ctx context.Context, at queue.ExpireAt) (next queue.ExpireAt, deleted int64, more bool, err error) {
	if r.ddl != nil {
		r.ddl.Lock()
		defer r.ddl.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	defer func() {
		if queue.IsReadOnly(err) {
			r.store.Reset() // a demoted primary: the next connections find the new one
		}
	}()
	width := doneWidth(r.keep)
	start := at == (queue.ExpireAt{})
	var ranges int
	var seq int64
	if start {
		// A walk starts with the ranges the next batches' settles need.
		if ranges, err = r.store.DoneAhead(ctx, width, doneAhead); err != nil {
			return at, 0, false, err
		}
		if _, seq, err = r.store.MessageAhead(ctx, r.ids.width(width), messageAhead); err != nil {
			return at, 0, false, err
		}
	}
	if next, deleted, more, err = r.store.ExpireDone(ctx, at, r.keep, expireBatch); err != nil {
		return at, 0, false, err
	}
	if ranges > 0 {
		r.log.Debug("retention: ranges of done messages created", "count", ranges, "span", width)
	}
	if start {
		r.ids.read(seq, r.now())
	}
	if deleted > 0 {
		r.send(ctx, serviceReport{expired: deleted})
	}
	if !more {
		// The walk's end: the ranges of messages it emptied go. The
		// batch's deletions are done and counted whatever this does: a
		// range not dropped now is dropped at the next walk's end.
		dropped, moved, rerr := r.store.RetireMessages(ctx, retireLeft, retireMost)
		switch {
		case rerr != nil:
			r.log.Warn("retention: ranges of messages not dropped; retrying at the next sweep", "err", rerr)
		case dropped > 0:
			r.log.Debug("retention: ranges of messages dropped", "count", dropped, "moved", moved)
		}
	}
	return next, deleted, more, nil
}

// send hands rep to the loop, unless the dispatcher gave up on the
// database (the loop may have returned).
func (r *retention) send(ctx context.Context, rep serviceReport) {
	select {
	case r.report <- rep:
	case <-ctx.Done():
	}
}

// idRate is how fast message ids are drawn, measured between two walks'
// starts: it sizes the ranges of message ids.
type idRate struct {
	seq   int64     // the id sequence at the last walk's start
	at    time.Time // when that was read
	rate  float64   // ids a second between the last two walks' starts
	rated bool      // rate was measured
}

// read notes the sequence's value seq at now.
func (r *idRate) read(seq int64, now time.Time) {
	if !r.at.IsZero() && seq >= r.seq && now.After(r.at) {
		r.rate, r.rated = float64(seq-r.seq)/now.Sub(r.at).Seconds(), true
	}
	r.seq, r.at = seq, now
}

// width is how many ids a range should hold to last span (0: as the last
// range, until the rate is measured).
func (r *idRate) width(span time.Duration) int64 { return int64(r.rate * span.Seconds()) }
