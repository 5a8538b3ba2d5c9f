package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The tests here run the whole dispatcher (Run, its lanes, chores,
// services and listener goroutine) on a fakeQueue through Options.OpenStore
// and DialLock, with real stage programs: a pipeline a → b of shell loops
// that answer each id with the move for the settle to apply, since the
// fake serves no SQL of theirs. The DSN reaches no server: a statement that
// did not go through the fake would fail.
const fakeConf = `[database]
DSN = host=/nonexistent/pepsi-fake dbname=none connect_timeout=1

[pepsi-dispatch]
%s

[stage-a]
PROGRAM = /bin/sh -c 'while read id; do echo "0 next:b"; done'
PARALLELISM = 2

[stage-b]
PROGRAM = /bin/sh -c 'while read id; do echo "0 done"; done'
PARALLELISM = 2
`

// fakeRun is a dispatcher running on a fakeQueue in this process.
type fakeRun struct {
	t      *testing.T
	q      *fakeQueue
	logs   *testkit.Buffer
	cancel context.CancelFunc
	done   chan error
}

// runFake starts a dispatcher with the [pepsi-dispatch] keys given on q.
func runFake(t *testing.T, q *fakeQueue, dispatch string) *fakeRun {
	t.Helper()
	cfg, err := config.Parse("fake.conf", []byte(fmt.Sprintf(fakeConf, dispatch)))
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeRun{t: t, q: q, logs: &testkit.Buffer{}, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := New(Options{Config: cfg, Log: log, OpenStore: q.openStore, DialLock: q.dialLock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		if r.cancel != nil {
			r.stop()
		}
	})
	return r
}

// stop cancels the dispatcher and fails the test unless Run returns nil.
func (r *fakeRun) stop() {
	r.t.Helper()
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("Run returned %v; log:\n%s", err, r.logs)
		}
	case <-time.After(time.Minute):
		r.t.Fatalf("dispatcher did not stop; log:\n%s", r.logs)
	}
}

// waitDone waits until n messages are done.
func (r *fakeRun) waitDone(n int) {
	r.t.Helper()
	testkit.Wait(r.t, fmt.Sprintf("%d messages done", n), time.Minute, func() bool {
		status, _ := r.q.count()
		return status[queue.Done] == n
	}, r.logs)
}

// check stops the dispatcher and checks that each of the n messages went
// through a and b once and is done, none left running, and that the
// statistics it wrote agree: every claim settled once, orphans as given.
func (r *fakeRun) check(n int, orphans int64) {
	r.t.Helper()
	r.stop()
	q := r.q
	status, stages := q.count()
	if status[queue.Done] != n || len(status) != 1 || stages["b"] != n {
		r.t.Errorf("rows by status %v, by stage %v; want all %d done at b", status, stages, n)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	g, a, b := q.global, q.stages["a"], q.stages["b"]
	if g.Claimed != g.Done+g.Failed+g.Paused+g.Requeued+g.Reset+g.Cancelled {
		r.t.Errorf("claimed %d != done %d + failed %d + paused %d + requeued %d + reset %d + cancelled %d",
			g.Claimed, g.Done, g.Failed, g.Paused, g.Requeued, g.Reset, g.Cancelled)
	}
	N := int64(n)
	if g.Done != N || g.Requeued != N || g.StagePasses != 2*N || g.Orphans != orphans {
		r.t.Errorf("dispatch stats %+v: want done and requeued %d, stage passes %d, orphans %d", g, N, 2*N, orphans)
	}
	if a == nil || b == nil || a.Processed != N || b.Processed != N || a.Failed+b.Failed != 0 {
		r.t.Errorf("stage stats a %+v, b %+v: want %d processed each, none failed", a, b, N)
	}
	if r.t.Failed() {
		r.t.Logf("log:\n%s", r.logs)
	}
}

// TestFakeLoop runs the loop on the fake: a backlog through both stages,
// then, once the dispatcher has armed, messages whose notification wakes
// it through the fake session.
func TestFakeLoop(t *testing.T) {
	const n = 400
	q := newFakeQueue()
	q.enqueue("a", n)
	r := runFake(t, q, "")
	r.waitDone(n)
	testkit.Wait(t, "the dispatcher to arm", time.Minute, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.armed
	}, r.logs)
	q.enqueue("a", n)
	testkit.Wait(t, "the session to hear the notification", time.Minute, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.woken > 0
	}, r.logs)
	r.waitDone(2 * n)
	r.check(2*n, 0)
	if q.dials != 1 {
		t.Errorf("%d sessions dialled; want 1", q.dials)
	}
}

// TestFakeOutage cuts the fake off in the middle of the backlog: the
// claim that meets the outage commits but its answer is lost, and every
// statement, the lock session and each redial fail for a while. The
// dispatcher must sit it out, come back through DialLock, find the lost
// claim's rows by its orphan sweep and finish every message once. Later
// a settle of finishes commits and its answer is lost too: sent again, it
// finds its rows done, and counts them once.
func TestFakeOutage(t *testing.T) {
	if !queue.IsOutage(errFakeOutage) {
		t.Fatalf("queue.IsOutage(%v) = false: the fake's failures would not be an outage", errFakeOutage)
	}
	const n = 400
	q := newFakeQueue()
	q.enqueue("a", n)
	var lost []int64
	lostSettle := 0
	q.fault = func(t *queue.Turn, res *queue.TurnResult, committed bool) error {
		if lost != nil && lostSettle == 0 && committed && len(t.Settles) > 0 &&
			!slices.ContainsFunc(t.Settles, func(s queue.Settle) bool { return s.Verdict != queue.Finish }) {
			lostSettle = len(t.Settles)
			return errFakeOutage
		}
		if lost != nil || !committed || len(res.Claimed) == 0 {
			return nil
		}
		done := 0
		for _, r := range q.rows {
			if r.status == queue.Done {
				done++
			}
		}
		if done < n/4 {
			return nil
		}
		for _, c := range res.Claimed {
			lost = append(lost, c.ID)
		}
		q.goDown(time.Second)
		return errFakeOutage
	}
	r := runFake(t, q, "RECONNECT_MIN = 0.1\nRECONNECT_MAX = 0.4")
	r.waitDone(n)
	r.check(n, int64(len(lost)))
	if len(lost) == 0 || lostSettle == 0 || q.failures < 2 || q.dials < 2 {
		t.Errorf("lost claim %v, lost settle of %d, %d statements and dials failed, %d sessions dialled: the faults did not happen as planned",
			lost, lostSettle, q.failures, q.dials)
	}
}
