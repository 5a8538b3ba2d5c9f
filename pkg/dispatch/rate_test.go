package dispatch

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b := newBucket(10, time.Second, t0) // a token every 100 ms, 10 at most

	// It starts with one token, not a burst.
	if n := b.available(t0); n != 1 {
		t.Fatalf("at start: %d tokens, want 1", n)
	}
	b.take(1, t0)
	if n := b.available(t0); n != 0 {
		t.Errorf("after the first: %d tokens, want 0", n)
	}
	// The next returns 100 ms later, exactly when next says.
	if got := b.next(t0, 1); !got.Equal(at(100 * time.Millisecond)) {
		t.Errorf("next token at %v, want 100ms", got.Sub(t0))
	}
	if n := b.available(at(100*time.Millisecond - 1)); n != 0 {
		t.Errorf("1ns before the next: %d tokens", n)
	}
	if n := b.available(at(100 * time.Millisecond)); n != 1 {
		t.Errorf("at the next: %d tokens, want 1", n)
	}
	if got := b.next(t0, 3); !got.Equal(at(300 * time.Millisecond)) {
		t.Errorf("3 tokens at %v, want 300ms", got.Sub(t0))
	}

	// Idle, it fills to one period's count and no further.
	if n := b.available(at(time.Hour)); n != 10 {
		t.Errorf("after an hour: %d tokens, want 10 (the burst)", n)
	}
	if got := b.next(at(time.Hour), 50); !got.Equal(at(time.Hour)) {
		t.Errorf("a full bucket: next at %v, want now", got.Sub(at(time.Hour)))
	}
	// Taking the burst leaves it empty; what it refills is the rate again.
	b.take(10, at(time.Hour))
	if n := b.available(at(time.Hour)); n != 0 {
		t.Errorf("after the burst: %d tokens", n)
	}
	if n := b.available(at(time.Hour + 450*time.Millisecond)); n != 4 {
		t.Errorf("450 ms after the burst: %d tokens, want 4", n)
	}
	// A part of a token is kept: 4 taken at 450 ms, the fifth at 500 ms.
	b.take(4, at(time.Hour+450*time.Millisecond))
	if got := b.next(at(time.Hour+450*time.Millisecond), 1); !got.Equal(at(time.Hour + 500*time.Millisecond)) {
		t.Errorf("after a part: next at %v, want 500ms", got.Sub(at(time.Hour)))
	}
	// Taking more than it holds leaves it owing.
	b.take(3, at(time.Hour+500*time.Millisecond))
	if n := b.available(at(time.Hour + 700*time.Millisecond)); n != 0 {
		t.Errorf("owing 2: %d tokens at 700 ms", n)
	}
	if n := b.available(at(time.Hour + 800*time.Millisecond)); n != 1 {
		t.Errorf("owing 2: %d tokens at 800 ms, want 1", n)
	}

	// next asks for at least one and at most the burst.
	if got := b.next(at(time.Hour+800*time.Millisecond), 0); !got.Equal(at(time.Hour + 800*time.Millisecond)) {
		t.Errorf("want 0: next at %v", got.Sub(at(time.Hour)))
	}
	if got, want := b.next(at(time.Hour+800*time.Millisecond), 99), at(time.Hour+1700*time.Millisecond); !got.Equal(want) {
		t.Errorf("want 99: next at %v, want 1.7s (10 tokens)", got.Sub(at(time.Hour)))
	}
}

// TestBucketBound: however the takes fall, no window of time sees more
// taken than one period's count plus the rate over the window.
func TestBucketBound(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const count, per = 50, time.Second
	b := newBucket(count, per, t0)
	type take struct {
		at time.Time
		n  int
	}
	var takes []take
	now := t0
	for i := range 5000 {
		// Irregular steps, idle spells now and then; take all there is.
		now = now.Add(time.Duration(1+i*7919%23) * time.Millisecond)
		if i%500 == 0 {
			now = now.Add(3 * time.Second)
		}
		if n := b.available(now); n > 0 {
			b.take(n, now)
			takes = append(takes, take{now, n})
		}
	}
	for i := range takes {
		sum := 0
		for j := i; j < len(takes); j++ {
			sum += takes[j].n
			w := takes[j].at.Sub(takes[i].at)
			if limit := count + int(int64(count)*int64(w)/int64(per)); sum > limit {
				t.Fatalf("%d taken in %v from %v, more than %d", sum, w, takes[i].at.Sub(t0), limit)
			}
		}
	}
	if len(takes) == 0 {
		t.Fatal("nothing taken")
	}
}

func TestBucketBatch(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		count int
		per   time.Duration
		want  int
	}{
		{200, time.Second, 1},                   // a token every 5 ms
		{10_000, time.Second, 20},               // every 100 µs
		{3, time.Hour, 1},                       // every 20 minutes
		{2_000_000_000, time.Second, 2_000_000}, // gap 1 ns at the least
	} {
		if got := newBucket(c.count, c.per, now).batch(claimDelay); got != c.want {
			t.Errorf("%d/%v: batch %d, want %d", c.count, c.per, got, c.want)
		}
	}
}
