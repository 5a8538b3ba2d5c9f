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

// newBucket returns a bucket of count tokens a period, holding one.
func newBucket(count int, per time.Duration, now time.Time) *bucket {
	b := &bucket{size: count, gap: max(per/time.Duration(count), 1)}
	b.reset(now)
	return b
}

// reset leaves one token in the bucket: the first message goes out at
// once, the rest at the rate. A dispatcher that starts (or restarts) does
// not begin with a burst.
func (b *bucket) reset(now time.Time) { b.empty = now.Add(-b.gap) }

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

// batch is how many tokens return within d (at least 1): what a wake for
// tokens waits for, so that a fast RATE does not wake the loop per token.
func (b *bucket) batch(d time.Duration) int { return max(int(d/b.gap), 1) }
