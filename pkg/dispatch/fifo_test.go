package dispatch

import "testing"

// TestFifoNeverEmpty: a queue that is pushed and popped for ever without
// ever emptying (a worker that always has ids in flight) keeps its order
// and does not grow.
func TestFifoNeverEmpty(t *testing.T) {
	var q fifo
	next, want := int64(0), int64(0)
	for range 4 {
		q.push(pass{id: next})
		next++
	}
	for range 100_000 {
		q.push(pass{id: next})
		next++
		if got := q.pop().id; got != want {
			t.Fatalf("popped %d, want %d", got, want)
		}
		want++
	}
	if q.len() != 4 || cap(q.ids) > 64 {
		t.Fatalf("len %d cap %d after 100 000 rounds with 5 in flight; want 4 and a small array", q.len(), cap(q.ids))
	}
}
