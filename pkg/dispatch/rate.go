package dispatch

import "time"

// bucket is a stage's RATE as a token bucket: it holds at most one
// period's count of tokens (the burst), they return one every gap (count
// per period), and every message handed out takes one.
//
// It is kept as one time, empty: when the bucket was, or will be, empty
// had nothing been taken since. Its tokens at now are (now - empty) / gap,
// at most size; a take moves empty on by gap a token. Times are exact
// (no fractions of a token to round), so the time next says a token
// returns is the time available first counts it.
type bucket struct {
	size  int           // the most tokens it holds: one period's count
	gap   time.Duration // the time one token takes to return: period / count
	empty time.Time
}

// newBucket returns a bucket of count tokens a period, full.
func newBucket(count int, per time.Duration) *bucket {
	return &bucket{size: count, gap: max(per/time.Duration(count), 1)}
}

// reset leaves n tokens in the bucket (at most its size).
func (b *bucket) reset(now time.Time, n int) {
	b.empty = now.Add(-time.Duration(min(n, b.size)) * b.gap)
}

// available is how many tokens the bucket holds at now.
func (b *bucket) available(now time.Time) int {
	d := now.Sub(b.empty)
	if d <= 0 {
		return 0
	}
	return int(min(d/b.gap, time.Duration(b.size)))
}

// take takes n tokens at now (more than it holds leaves it owing).
func (b *bucket) take(n int, now time.Time) {
	if full := now.Add(-time.Duration(b.size) * b.gap); b.empty.Before(full) {
		b.empty = full // it filled up meanwhile: what overflowed is gone
	}
	b.empty = b.empty.Add(time.Duration(n) * b.gap)
}

// next is when the bucket holds want tokens (at least 1, at most its
// size): now, if it already does.
func (b *bucket) next(now time.Time, want int) time.Time {
	want = min(max(want, 1), b.size)
	if t := b.empty.Add(time.Duration(want) * b.gap); t.After(now) {
		return t
	}
	return now
}

// batch is how many tokens return within d, at least 1.
func (b *bucket) batch(d time.Duration) int { return max(int(d/b.gap), 1) }

// How RATE enters the claim. A stage's cap is its room (slots.capacity)
// or its tokens, whichever is less. A stage with room and fewer tokens
// than a batch (rateBatch's worth, or its room if that is less) is left
// out of the claim, stays worth one (stagePlan.more: it may have pending rows)
// and tokensAt says when the loop must wake for it. Tokens are taken as
// messages are handed to workers: those a claim gets but gives back (not
// run: no worker could take them, a stop began) take none, since no stage
// program saw them. Nothing here is per message but the take, and a stage
// without RATE costs one nil check a claim and a hand.

// rateBatch is how long a stage out of tokens gathers them for its next
// claim: a RATE costs a claim, a settle and a wake of each worker per
// batch, not per message (100/s: 5 every 50 ms, twenty claims a second).
// A longer batch would cost less but would make the count handed out in
// one second swing by a whole batch. A slow one (20/s or less) is
// claimed for one token at a time.
const rateBatch = 50 * time.Millisecond

// rateHold is the longest wait for a stage's tokens that the dispatcher
// spends awake: a hot poll with nothing else to claim for waits for them
// instead of counting as a turn that found nothing, so the dispatcher does
// not arm (and make producers notify) between two of its own claims.
// Messages at stages that had no room then wait at most this long for
// the held poll. A longer wait is spent as any idle one, armed.
const rateHold = armGapMax

// startRates leaves each RATE bucket with a batch of tokens as
// dispatching begins: the first messages go out at once, the rest at the
// rate; a dispatcher that starts (or restarts) begins with no burst.
func (p *planner) startRates(now time.Time) {
	for _, st := range p.stages {
		if st.rate != nil {
			st.rate.reset(now, st.rate.batch(rateBatch))
		}
	}
}

// rated caps c, stage st's room at now, at the tokens its RATE (st.rate,
// not nil) has left. A stage with fewer than a batch is marked worth a
// claim, and the time the batch is there goes into p.tokensAt.
func (p *planner) rated(st *stagePlan, c int, now time.Time) int {
	want := min(c, st.rate.batch(rateBatch))
	if n := st.rate.available(now); n >= want {
		return min(c, n)
	}
	st.more = true
	p.tokensAt = earliest(p.tokensAt, st.rate.next(now, want))
	return 0
}

// room is what stage st can be handed at most when its workers are idle:
// PARALLELISM × QUEUE_LIMIT, or its tokens when they are fewer.
func (st *stagePlan) room(now time.Time) int {
	r := st.cfg.Parallelism * st.cfg.QueueLimit
	if st.rate != nil {
		r = min(r, st.rate.available(now))
	}
	return r
}

// tokensSoon reports whether a stage the last claim left out for want of
// tokens gets them back within rateHold of now: work to come.
func (p *planner) tokensSoon(now time.Time) bool {
	return !p.tokensAt.IsZero() && p.tokensAt.Sub(now) <= rateHold
}
