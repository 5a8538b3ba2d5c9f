package dispatch

import (
	"sync"
	"testing"
	"time"
)

// recorder is an Observer that counts what it hears.
type recorder struct {
	mu       sync.Mutex
	handed   map[string]int
	passed   map[Result]int
	started  int
	failed   int
	healthy  bool
	inflight int

	stderrLines, stderrBytes int64
}

func (r *recorder) Handed(stage string, waited time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handed[stage]++
}
func (r *recorder) Passed(stage string, res Result, busy time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passed[res]++
}
func (r *recorder) WorkerStarted(string) { r.mu.Lock(); r.started++; r.mu.Unlock() }
func (r *recorder) WorkerStartFailed(string) {
	r.mu.Lock()
	r.failed++
	r.mu.Unlock()
}
func (r *recorder) Pool(stage string, workers, inflight int) {
	r.mu.Lock()
	r.inflight = max(r.inflight, inflight)
	r.mu.Unlock()
}
func (r *recorder) ListenerReconnect(string) {}
func (r *recorder) QueueRetry(string)        {}
func (r *recorder) OrphansRescued(int64)     {}
func (r *recorder) Health(ok bool)           { r.mu.Lock(); r.healthy = ok; r.mu.Unlock() }
func (r *recorder) StderrDropped(_ string, lines, bytes int64) {
	r.mu.Lock()
	r.stderrLines += lines
	r.stderrBytes += bytes
	r.mu.Unlock()
}
func (r *recorder) get(f func()) { r.mu.Lock(); defer r.mu.Unlock(); f() }

// TestObserver: the dispatcher reports handed messages, pass results,
// worker starts and its health.
func TestObserver(t *testing.T) {
	rec := &recorder{handed: map[string]int{}, passed: map[Result]int{}}
	b := setup(t, fast+"\nMAX_RUNTIME = 4", "a\nPARALLELISM = 1\nQUEUE_LIMIT = 2", "b", "broken\nPROGRAM = /nonexistent")
	b.obs = rec
	b.enqueue("a", "a=advance:b", "a=exit:1", "a=hang", "a=finish")
	b.enqueue("broken", "x")
	b.start()
	b.waitFor("all settled", time.Minute, func() bool {
		return b.int64("SELECT (SELECT count(*) FROM pepsi.state WHERE stage <> 'broken' AND status NOT IN ('done', 'failed')) + (SELECT count(*) FROM pepsi.ingress)") == 0
	})
	// A stage commits before it answers: the rows can be settled before
	// the dispatcher has read the last answer.
	b.waitFor("every pass reported", time.Minute, func() bool {
		n := 0
		rec.get(func() { n = rec.passed[ResultOK] + rec.passed[ResultFailed] + rec.passed[ResultTimeout] })
		return n >= 5
	})
	rec.get(func() {
		if !rec.healthy {
			t.Error("not healthy while running")
		}
		if rec.handed["a"] < 4 || rec.handed["b"] != 1 {
			t.Errorf("handed %v", rec.handed)
		}
		if rec.passed[ResultOK] != 3 || rec.passed[ResultFailed] != 1 || rec.passed[ResultTimeout] != 1 {
			t.Errorf("passed %v", rec.passed)
		}
		if rec.started < 2 || rec.failed < 1 {
			t.Errorf("workers started %d, failed to start %d", rec.started, rec.failed)
		}
	})
	b.checkInvariants()
	rec.get(func() {
		if rec.healthy {
			t.Error("healthy after stop")
		}
	})
}
