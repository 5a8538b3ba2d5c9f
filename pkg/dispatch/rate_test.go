package dispatch

import (
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func TestBucket(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b := newBucket(10, time.Second) // a token every 100 ms, 10 at most
	if n := b.available(t0); n != 10 {
		t.Fatalf("a new bucket: %d tokens, want 10 (full)", n)
	}
	b.reset(t0, 99)
	if n := b.available(t0); n != 10 {
		t.Fatalf("reset to 99: %d tokens, want 10 (its size)", n)
	}
	b.reset(t0, 1)
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
	b := newBucket(count, per)
	b.reset(t0, 1)
	type take struct {
		at time.Time
		n  int
	}
	var takes []take
	now := t0
	for i := range 2000 {
		// Irregular steps, idle spells now and then; take all there is.
		now = now.Add(time.Duration(1+i*7919%23) * time.Millisecond)
		if i%400 == 0 {
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
	for _, c := range []struct {
		count int
		per   time.Duration
		want  int
	}{
		{200, time.Second, 10},                   // a token every 5 ms
		{100, time.Second, 5},                    // every 10 ms
		{20, time.Second, 1},                     // every 50 ms
		{10_000, time.Second, 500},               // every 100 µs
		{3, time.Hour, 1},                        // every 20 minutes
		{2_000_000_000, time.Second, 50_000_000}, // every ns, the least gap
	} {
		if got := newBucket(c.count, c.per).batch(rateBatch); got != c.want {
			t.Errorf("%d/%v: batch %d, want %d", c.count, c.per, got, c.want)
		}
	}
}

// rateConf is unitConf with RATE = 10/s (a token every 100 ms) and room
// for 32 at stage a.
var rateConf = strings.Replace(unitConf, "QUEUE_LIMIT = 4\n", "QUEUE_LIMIT = 16\nRATE = 10/s\n", 1)

// claimRated starts a claim at the unit's time and returns its caps, or
// nil when none was started.
func (u *unit) claimRated() map[string]int {
	u.t.Helper()
	u.startClaim(u.at)
	if u.claimer.job == nil {
		return nil
	}
	j := u.sent(&u.claimer)
	caps := map[string]int{}
	for _, c := range j.turn.Caps {
		caps[c.Stage] = c.Cap
	}
	return caps
}

// answer finishes the claim in flight with ids claimed at stage a.
func (u *unit) answer(ids ...int64) {
	j := u.claimer.job
	j.res = queue.TurnResult{}
	for _, id := range ids {
		j.res.Claimed = append(j.res.Claimed, queue.Claimed{ID: id, Stage: "a"})
	}
	u.finishJob(j, u.at)
}

func TestClaimRate(t *testing.T) {
	u := newUnitConf(t, rateConf)
	a, b := u.byName["a"], u.byName["b"]
	b.coolUntil = u.at.Add(time.Hour) // a alone has room
	w := u.worker("a")
	t0 := u.at

	// One token at the start: a cap of 1, claimed at once although it is
	// a thirty-second of the room (a rated stage's room is its tokens).
	if caps := u.claimRated(); caps["a"] != 1 || len(caps) != 1 {
		t.Fatalf("first claim: caps %v, want a:1", caps)
	}
	u.answer(1)
	if got := fed(w); got != "1\n" || a.plan.rate.available(u.at) != 0 {
		t.Fatalf("fed %q, %d tokens left; want 1 handed, none left", got, a.plan.rate.available(u.at))
	}
	if !a.plan.more {
		t.Error("a filled its cap but is not worth another claim")
	}

	// No token: no claim; the loop sleeps until the poll and then, the
	// poll held, until the next token, 100 ms after the first.
	if caps := u.claimRated(); caps != nil {
		t.Fatalf("claimed %v without a token", caps)
	}
	if got := u.nextDeadline(u.at).Sub(u.at); got != pollGap {
		t.Errorf("next deadline in %v, want the poll's %v", got, pollGap)
	}
	u.at = u.at.Add(pollGap)
	if caps := u.claimRated(); caps != nil {
		t.Fatalf("the poll claimed %v without a token", caps)
	}
	if got := u.nextDeadline(u.at); !got.Equal(t0.Add(100 * time.Millisecond)) {
		t.Errorf("next deadline at %v, want the next token's 100ms", got.Sub(t0))
	}
	if u.plan.waker.mode != wakeHot || !a.plan.more {
		t.Errorf("waiting for a token: wake mode %d, more %v; want hot, worth a claim", u.plan.waker.mode, a.plan.more)
	}
	u.at = t0.Add(100 * time.Millisecond)
	if caps := u.claimRated(); caps["a"] != 1 {
		t.Fatalf("with the token back: caps %v, want a:1", caps)
	}
	u.answer(2)
	fed(w)

	// A wake while out of tokens (a notification: every stage worth a
	// claim, paused rows worth a look) resumes, claims nothing at a, and
	// a stays worth a claim.
	u.woken()
	if caps := u.claimRated(); caps == nil || caps["a"] != 0 {
		t.Fatalf("woken: caps %v, want a turn that claims nothing", caps)
	}
	u.answer()
	if !a.plan.more {
		t.Error("a stage left out for want of tokens lost its claim")
	}

	// After a quiet spell the burst is one period's count, here less
	// than the room.
	u.at = u.at.Add(time.Minute)
	if caps := u.claimRated(); caps["a"] != 10 {
		t.Fatalf("after a minute: caps %v, want a:10 (one second's worth)", caps)
	}
	// Messages given back (a stop began) take no token.
	u.stopping = true
	u.answer(3, 4, 5)
	if n := a.plan.rate.available(u.at); n != 10 {
		t.Errorf("after 3 were not run: %d tokens, want 10", n)
	}
}

func TestClaimRateDeadline(t *testing.T) {
	u := newUnitConf(t, rateConf)
	u.byName["b"].coolUntil = u.at.Add(time.Hour)
	u.worker("a")
	u.plan.byName["a"].rate.take(1, u.at)
	u.claimRated()
	// The deadline is the token's, not a poll, while nothing else is due.
	u.plan.waker.pollAt = time.Time{}
	if got := u.nextDeadline(u.at).Sub(u.at); got != 100*time.Millisecond {
		t.Errorf("next deadline in %v, want 100ms", got)
	}
	// A claim in flight wakes the loop with its result instead.
	u.claimer.job, u.plan.claimRunning = &u.claimer.buf, true
	if got := u.nextDeadline(u.at).Sub(u.at); got != 10*time.Second {
		t.Errorf("with a claim in flight: next deadline in %v, want the statistics interval", got)
	}
}

// TestClaimRateBatch: a fast RATE is claimed for in batches of 50 ms'
// worth, or the room when that is less.
func TestClaimRateBatch(t *testing.T) {
	u := newUnitConf(t, strings.Replace(rateConf, "RATE = 10/s", "RATE = 200/s", 1))
	u.byName["b"].coolUntil = u.at.Add(time.Hour)
	w := u.worker("a")
	t0 := u.at
	if caps := u.claimRated(); caps["a"] != 10 {
		t.Fatalf("first claim: caps %v, want a:10 (the batch a dispatcher starts with)", caps)
	}
	u.answer(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for _, ms := range []time.Duration{5, 20, 45} {
		u.at = t0.Add(ms * time.Millisecond)
		if caps := u.claimRated(); caps != nil {
			t.Fatalf("at %v ms: claimed %v with fewer tokens than a batch", ms, caps)
		}
	}
	if !u.plan.tokensAt.Equal(t0.Add(50 * time.Millisecond)) {
		t.Errorf("tokens awaited at %v, want 50ms", u.plan.tokensAt.Sub(t0))
	}
	u.at = t0.Add(50 * time.Millisecond)
	if caps := u.claimRated(); caps["a"] != 10 {
		t.Fatalf("at 50 ms: caps %v, want a:10", caps)
	}
	u.answer(11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	// With room for 2 only, 2 tokens are a batch.
	u.worker("a", 30, 31, 32, 33, 34, 35, 36, 37, 38, 39)
	if c := u.byName["a"].capacity(u.at); c != 2 {
		t.Fatalf("capacity %d, want 2 (w holds %d)", c, w.inflight.len())
	}
	u.at = t0.Add(60 * time.Millisecond)
	if caps := u.claimRated(); caps["a"] != 2 {
		t.Fatalf("at 60 ms with room for 2: caps %v, want a:2", caps)
	}
}
