package dashboard

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The queue's counts, shared by every page that shows them: the overview,
// and the lists' totals. The sampler counts every SampleEvery while
// someone looks, so that a page seldom waits for a count (which reads
// every row of the statuses counted); a page counts when the last count
// is older than that. Done messages, the largest partition by far and the
// count that says least, are counted at most every doneMaxAge. Each count
// of pending messages is kept for the backlog's trend.
//
// A count runs on its own, not in the page that asked for it: the page
// waits for it countWait at most, and shows what it has then (see
// queueCounts): at 5 million messages a day the first count after a quiet
// spell takes a tenth of a second for the live messages and seconds for
// the done ones, and the page answers at once, saying it counts, and has
// them at its next refresh.

// countWait is how long a page waits for a count in flight.
const countWait = 20 * time.Millisecond

// doneMaxAge is how old the count of done messages may be.
const doneMaxAge = 30 * time.Second

// trendSpan is how far back the backlog's trend looks.
const trendSpan = 5 * time.Minute

// queueCounts is one count of the queue. A page's counts may lack a part
// still being counted: the live messages' (at is zero), or the done ones'
// (doneAt is zero); done's may be older than the live ones'.
type queueCounts struct {
	live   []admin.StageCount // every status but done
	now    time.Time          // the server's clock at the live count
	at     time.Time          // this clock at the live count
	done   map[string]int64   // done messages by stage
	doneAt time.Time          // this clock at the count of done messages
}

// known says whether q holds the count of status ("": every status).
func (q queueCounts) known(status queue.Status) bool {
	switch status {
	case queue.Done:
		return !q.doneAt.IsZero()
	case "":
		return !q.at.IsZero() && !q.doneAt.IsZero()
	}
	return !q.at.IsZero()
}

// fresh says whether q's live part is younger than maxAge and its done part
// younger than doneAge.
func (q queueCounts) fresh(maxAge, doneAge time.Duration) (live, done bool) {
	return !q.at.IsZero() && time.Since(q.at) < maxAge, !q.doneAt.IsZero() && time.Since(q.doneAt) < doneAge
}

// n is the count of stage's messages in status; stage "" is every stage.
func (q queueCounts) n(stage string, status queue.Status) int64 {
	if status == queue.Done {
		if stage == "" {
			var t int64
			for _, n := range q.done {
				t += n
			}
			return t
		}
		return q.done[stage]
	}
	var t int64
	for _, c := range q.live {
		if (stage == "" || c.Stage == stage) && (status == "" || c.Status == status) {
			t += c.N
		}
	}
	if status == "" {
		t += q.n(stage, queue.Done)
	}
	return t
}

// backlogPoint is the pending messages of each stage at one moment.
type backlogPoint struct {
	at      time.Time
	pending map[string]int64
}

// countCache is the last count and the backlog's history.
type countCache struct {
	keep time.Duration // how much backlog history is kept

	mu      sync.Mutex // cur, history and job
	cur     queueCounts
	history []backlogPoint // oldest first
	job     *countJob      // the count in flight, nil when none runs
	gen     int            // invalidate's: a count started before one is not kept
}

// countJob is one count in flight: over is closed when it ends, err is
// then its error.
type countJob struct {
	over chan struct{}
	err  error
	gen  int // the cache's when it started
}

func newCountCache(keep time.Duration) *countCache {
	return &countCache{keep: max(keep, trendSpan)}
}

// refresh counts the live messages now, and the done ones when their count
// is older than doneMaxAge, and waits for the count: the sampler's.
func (c *countCache) refresh(ctx context.Context, db *admin.DB) error {
	_, err := c.count(ctx, db, 0, doneMaxAge, 0)
	return err
}

// count returns counts whose live part is younger than maxAge and whose
// done part is younger than doneAge, counting what is older: the count
// runs on its own (one at a time), and count waits for it wait at most (0:
// until it ends). When the wait ends first, the counts lack the live part
// unless it is younger than maxAge (see queueCounts), and have the done
// part of the last count, however old, if any.
func (c *countCache) count(ctx context.Context, db *admin.DB, maxAge, doneAge, wait time.Duration) (queueCounts, error) {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		c.mu.Lock()
		live, done := c.cur.fresh(maxAge, doneAge)
		if live && done {
			cur := c.cur
			c.mu.Unlock()
			return cur, nil
		}
		mine := c.job == nil
		if mine { // else the count in flight may do; then look again
			c.job = &countJob{over: make(chan struct{}), gen: c.gen}
			go c.run(db, c.job, !live, !done)
		}
		job := c.job
		c.mu.Unlock()
		select {
		case <-job.over:
			if job.err != nil || mine {
				return c.partial(maxAge), job.err
			}
		case <-timeout:
			return c.partial(maxAge), nil
		case <-ctx.Done():
			return c.partial(maxAge), ctx.Err()
		}
	}
}

// partial is the last count without its live part when that is older than
// maxAge.
func (c *countCache) partial(maxAge time.Duration) queueCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.cur
	if live, _ := q.fresh(maxAge, 0); !live {
		q.live, q.now, q.at = nil, time.Time{}, time.Time{}
	}
	return q
}

// run counts the live messages (live) and the done ones (done) for job,
// keeping each part as it has it, and ends the job. It does not stop with
// the page that started it: the next page has the counts.
func (c *countCache) run(db *admin.DB, job *countJob, live, done bool) {
	ctx, cancel := context.WithTimeout(context.Background(), sampleTimeout)
	defer cancel()
	defer func() {
		c.mu.Lock()
		c.job = nil
		c.mu.Unlock()
		close(job.over)
	}()
	if live {
		counts, now, err := db.LiveCounts(ctx)
		if err != nil {
			job.err = err
			return
		}
		at := time.Now()
		pending := map[string]int64{}
		for _, x := range counts {
			if x.Status == queue.Pending {
				pending[x.Stage] += x.N
			}
		}
		c.mu.Lock()
		if job.gen == c.gen {
			c.cur.live, c.cur.now, c.cur.at = counts, now, at
			c.addLocked(at, pending)
		}
		c.mu.Unlock()
	}
	if done {
		counts, err := db.DoneCounts(ctx)
		if err != nil {
			job.err = err
			return
		}
		c.mu.Lock()
		if job.gen == c.gen {
			c.cur.done, c.cur.doneAt = counts, time.Now()
		}
		c.mu.Unlock()
	}
}

// latest is the last count, however old.
func (c *countCache) latest() queueCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// invalidate makes the next page count again: an action changed the queue,
// and the counts it changed are not shown again.
func (c *countCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = queueCounts{}
	c.gen++
}

// addBacklog records the pending messages of each stage at at.
func (c *countCache) addBacklog(at time.Time, pending map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(at, pending)
}

func (c *countCache) addLocked(at time.Time, pending map[string]int64) {
	i := len(c.history)
	for i > 0 && c.history[i-1].at.After(at) {
		i--
	}
	c.history = append(c.history, backlogPoint{})
	copy(c.history[i+1:], c.history[i:])
	c.history[i] = backlogPoint{at, pending}
	keep := c.history[len(c.history)-1].at.Add(-c.keep)
	j := 0
	for j < len(c.history)-1 && c.history[j].at.Before(keep) {
		j++
	}
	c.history = c.history[j:]
}

// backlogTrend is whether a stage's pending messages grow or drain.
type backlogTrend struct {
	// Trend is growing, draining, steady, empty (none pending, and none
	// coming), or unknown (too few counts yet: it takes 30 s).
	Trend     string  `json:"trend"`
	PerMinute float64 `json:"per_minute"` // the change, messages per minute (negative: draining)
	// DrainsIn is, while draining, when none would be left at this pace,
	// in seconds.
	DrainsIn *float64 `json:"drains_in_seconds,omitempty"`
	Span     float64  `json:"span_seconds"` // the counts it is drawn from span this long
}

// trend is stage's backlog trend over the counts of the last trendSpan
// before now, pending being its latest count: the slope of a least-squares
// line through them, steady when it would change the backlog by less than
// 2 % (and 3 messages) over trendSpan.
func (c *countCache) trend(stage string, pending int64, now time.Time) backlogTrend {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n, sx, sy, sxx, sxy float64
	var first, last time.Time
	for _, p := range c.history {
		if p.at.Before(now.Add(-trendSpan)) || p.at.After(now) {
			continue
		}
		if first.IsZero() {
			first = p.at
		}
		last = p.at
		x, y := p.at.Sub(now).Seconds(), float64(p.pending[stage])
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	t := backlogTrend{Trend: "unknown", Span: last.Sub(first).Seconds()}
	if n < 3 || t.Span < 30 {
		return t
	}
	slope := (n*sxy - sx*sy) / (n*sxx - sx*sx) // per second
	if math.IsNaN(slope) || math.IsInf(slope, 0) {
		return t
	}
	t.PerMinute = slope * 60
	change := slope * trendSpan.Seconds()
	switch {
	case math.Abs(change) < max(3, 0.02*float64(pending)) && pending == 0:
		t.Trend = "empty"
	case math.Abs(change) < max(3, 0.02*float64(pending)):
		t.Trend = "steady"
	case slope > 0:
		t.Trend = "growing"
	case pending == 0:
		t.Trend = "empty"
	default:
		t.Trend = "draining"
		in := float64(pending) / -slope
		t.DrainsIn = &in
	}
	return t
}
