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
// and the lists' totals. The sampler counts every SampleEvery, so that a
// page seldom waits for a count (which reads every row of the statuses
// counted); a page counts itself only when the last count is older than
// that. Done messages, the largest partition by far and the count that
// says least, are counted at most every doneMaxAge. Each count of pending
// messages is kept for the backlog's trend.

// doneMaxAge is how old the count of done messages may be.
const doneMaxAge = 30 * time.Second

// trendSpan is how far back the backlog's trend looks.
const trendSpan = 5 * time.Minute

// queueCounts is one count of the queue.
type queueCounts struct {
	live   []admin.StageCount // every status but done
	now    time.Time          // the server's clock at the live count
	at     time.Time          // this clock at the live count
	done   map[string]int64   // done messages by stage
	doneAt time.Time          // this clock at the count of done messages
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

	counting sync.Mutex // one count at a time
	mu       sync.Mutex // cur and history
	cur      queueCounts
	history  []backlogPoint // oldest first
}

func newCountCache(keep time.Duration) *countCache {
	return &countCache{keep: max(keep, trendSpan)}
}

// get returns a count whose live part is no older than maxAge and whose
// done part is no older than doneAge, counting if need be.
func (c *countCache) get(ctx context.Context, db *admin.DB, maxAge, doneAge time.Duration) (queueCounts, error) {
	return c.count(ctx, db, maxAge, doneAge)
}

// refresh counts the live messages now, and the done ones when their count
// is older than doneMaxAge: the sampler's count.
func (c *countCache) refresh(ctx context.Context, db *admin.DB) error {
	_, err := c.count(ctx, db, 0, doneMaxAge)
	return err
}

// count returns the counts, counting the live messages again when their
// count is older than maxAge and the done ones when theirs is older than
// doneAge.
func (c *countCache) count(ctx context.Context, db *admin.DB, maxAge, doneAge time.Duration) (queueCounts, error) {
	fresh := func(q queueCounts) (live, done bool) {
		return !q.at.IsZero() && time.Since(q.at) < maxAge, !q.doneAt.IsZero() && time.Since(q.doneAt) < doneAge
	}
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	if live, done := fresh(cur); live && done {
		return cur, nil
	}
	c.counting.Lock()
	defer c.counting.Unlock()
	c.mu.Lock()
	cur = c.cur // counted meanwhile?
	c.mu.Unlock()
	live, done := fresh(cur)
	if maxAge == 0 {
		live = false
	}
	if !live {
		counts, now, err := db.LiveCounts(ctx)
		if err != nil {
			return cur, err
		}
		cur.live, cur.now, cur.at = counts, now, time.Now()
	}
	if !done {
		counts, err := db.DoneCounts(ctx)
		if err != nil {
			return cur, err
		}
		cur.done, cur.doneAt = counts, time.Now()
	}
	c.mu.Lock()
	c.cur = cur
	if !live {
		pending := map[string]int64{}
		for _, x := range cur.live {
			if x.Status == queue.Pending {
				pending[x.Stage] += x.N
			}
		}
		c.addLocked(cur.at, pending)
	}
	c.mu.Unlock()
	return cur, nil
}

// latest is the last count, however old.
func (c *countCache) latest() queueCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// invalidate makes the next page count again: an action changed the queue.
func (c *countCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur.at, c.cur.doneAt = time.Time{}, time.Time{}
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
