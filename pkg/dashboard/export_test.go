package dashboard

import (
	"context"
	"net/http"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// AddSample records statistics as if the server had sampled them at at:
// the browser test's overview shows minutes of history without waiting
// for them.
func (d *Dashboard) AddSample(at time.Time, stages []queue.StageStats) { d.samples.add(at, stages) }

// AddBacklog records the pending messages of each stage as if the server
// had counted them at at: the browser test's overview shows a backlog's
// trend without waiting minutes for it.
func (d *Dashboard) AddBacklog(at time.Time, pending map[string]int64) {
	d.counts.addBacklog(at, pending)
}

// WaitForCounts makes a page wait for the counts it asks for however long
// they take, rather than countWait at most.
func (d *Dashboard) WaitForCounts() { d.countWait = 0 }

// CountsIn waits until no count of the queue is in flight.
func (d *Dashboard) CountsIn(ctx context.Context) error {
	d.counts.mu.Lock()
	job := d.counts.job
	d.counts.mu.Unlock()
	if job == nil {
		return nil
	}
	select {
	case <-job.over:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ForgetCounts makes the next page count the queue itself, as it does
// when the sampler has not (the first page after a start).
func (d *Dashboard) ForgetCounts() { d.counts.invalidate() }

// WriteJSON answers v as JSON, as every page asked for JSON does.
func (d *Dashboard) WriteJSON(w http.ResponseWriter, r *http.Request, v any) {
	d.writeJSON(w, r, http.StatusOK, v)
}

// ConfirmBytes is the memory the kept confirmations' ids take.
func (d *Dashboard) ConfirmBytes() int {
	d.confirms.mu.Lock()
	defer d.confirms.mu.Unlock()
	return d.confirms.bytes
}

// Sampled is how many samples of the statistics the dashboard keeps, and
// when it last counted the queue (zero: never).
func (d *Dashboard) Sampled() (int, time.Time) {
	d.samples.mu.Lock()
	n := len(d.samples.samples)
	d.samples.mu.Unlock()
	return n, d.counts.latest().at
}

// Unwatch makes the dashboard one nobody has looked at.
func (d *Dashboard) Unwatch() { d.viewed.Store(0) }

// SampleNow takes one sample as the sampler does; with done, as the one
// every doneMaxAge that counts the done messages too.
func (d *Dashboard) SampleNow(ctx context.Context, done bool) error {
	if done {
		d.counts.mu.Lock()
		d.counts.cur.doneAt = time.Time{}
		d.counts.mu.Unlock()
	}
	return d.sample(ctx)
}
