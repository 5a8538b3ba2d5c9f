package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"

	"github.com/pepsi-dev/pepsi/pkg/config"
)

// pool is one stage's workers: the dispatcher's routing of its messages.
// What the queue's decisions know of the stage is its plan.
type pool struct {
	cfg       config.Stage
	plan      *stagePlan
	workers   []*worker // in start order
	coolUntil time.Time // no claims and no starts before this
	cooling   bool      // in a cooldown episode (logged once)
	retry     queue.RetryPolicy
	notRun    notRunLog
}

// live counts the workers that hold a PARALLELISM slot: all but those told to stop.
func (p *pool) live() int {
	n := 0
	for _, w := range p.workers {
		if !w.stopping {
			n++
		}
	}
	return n
}

// capacity is how many more messages the stage can take now: free slots of
// its feedable workers plus QUEUE_LIMIT (or MAX_MESSAGES, if smaller) for
// each worker it may still start. A claim of this many can all be handed.
func (p *pool) capacity(now time.Time) int {
	if now.Before(p.coolUntil) {
		return 0
	}
	c := 0
	for _, w := range p.workers {
		c += w.free(p.cfg.QueueLimit, p.cfg.MaxMessages)
	}
	return c + (p.cfg.Parallelism-p.live())*min(p.cfg.QueueLimit, p.cfg.MaxMessages)
}

// coolingDown reports whether the stage's program is held off until its
// cooldown ends.
func (p *pool) coolingDown(now time.Time) bool { return now.Before(p.coolUntil) }

// pick returns the earliest-started worker with a free slot, or nil.
func (p *pool) pick() *worker {
	for _, w := range p.workers {
		if w.free(p.cfg.QueueLimit, p.cfg.MaxMessages) > 0 {
			return w
		}
	}
	return nil
}

// remove drops w from the pool.
func (p *pool) remove(w *worker) {
	for i, x := range p.workers {
		if x == w {
			p.workers = append(p.workers[:i], p.workers[i+1:]...)
			return
		}
	}
}
