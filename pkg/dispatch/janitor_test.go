package dispatch

// Database-free tests of the services' base and of their supervisor,
// with fake services.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// fencedError is what pepsi.fence() fails with once the lock session is gone.
func fencedError() error {
	return &pgconn.PgError{Code: "55P03", Message: "pepsi: the lock session is gone"}
}

// A service's goroutine runs from Start to Stop; a second Start while it
// runs starts nothing, Stop may come twice or before Start, and a Stop
// lets work under ctx finish while it cancels stop.
func TestServiceStartStop(t *testing.T) {
	var s startStop
	s.Stop() // before Start
	var mu sync.Mutex
	runs := 0
	finished := make(chan struct{})
	fn := func(ctx, stop context.Context) {
		mu.Lock()
		runs++
		mu.Unlock()
		<-stop.Done()
		if ctx.Err() != nil {
			t.Error("Stop cancelled the work's context")
		}
		finished <- struct{}{}
	}
	s.start(context.Background(), fn)
	s.start(context.Background(), fn)
	go s.Stop()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not stop the goroutine")
	}
	s.Stop()
	s.Stop()
	s.start(context.Background(), fn)
	go s.Stop()
	<-finished
	s.Stop()
	if runs != 2 {
		t.Errorf("%d runs, want 2 (one per Start after a Stop)", runs)
	}

	// The dispatcher's context stops it too.
	ctx, cancel := context.WithCancel(context.Background())
	s.start(ctx, func(ctx, stop context.Context) { <-stop.Done(); finished <- struct{}{} })
	cancel()
	<-finished
	s.Stop()
}

// fakeService counts its starts and stops.
type fakeService struct {
	mu            sync.Mutex
	starts, stops int
	running       bool
}

func (f *fakeService) Start(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		f.starts++
		f.running = true
	}
	return nil
}

func (f *fakeService) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running {
		f.stops++
		f.running = false
	}
}

func (f *fakeService) count() (starts, stops int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts, f.stops
}

// The services start when the janitor role is gained, stop when it is
// lost, start again when it is gained again, and stop for good when the
// dispatcher stops.
func TestJanitorMaintain(t *testing.T) {
	r := newJanitorRole()
	a, b := &fakeService{}, &fakeService{}
	reports := make(chan serviceReport, 1)
	go r.maintain(context.Background(), []service{a, b}, reports, slog.Default())
	want := func(what string, starts, stops int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			as, ap := a.count()
			bs, bp := b.count()
			if as == starts && ap == stops && bs == starts && bp == stops {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: a started %d, stopped %d; b %d, %d; want %d, %d", what, as, ap, bs, bp, starts, stops)
			}
			time.Sleep(time.Millisecond)
		}
	}
	r.set(true)
	want("role gained", 1, 0)
	r.set(true)
	r.set(false)
	want("role lost", 1, 1)
	r.set(true)
	want("role gained again", 2, 1)
	close(r.quit)
	select {
	case rep := <-reports:
		if !rep.over {
			t.Fatalf("report %+v, want over", rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the services were not stopped for good")
	}
	want("dispatcher stopped", 2, 2)
}

// What the services report is booked by the loop: deletions as statistics,
// failures as queue retries (not when the fence refused them), and their
// end as what a stop waits for.
func TestReported(t *testing.T) {
	u := newUnit(t)
	obs := &retryCounter{}
	u.obs = obs
	u.reported(serviceReport{expired: 4})
	u.reported(serviceReport{err: errors.New("connection refused")})
	u.reported(serviceReport{err: fencedError()})
	if u.tally.global.Expired != 4 || !u.tally.dirty || obs.n != 1 || !u.outage.failing {
		t.Errorf("expired %d, dirty %v, retries %d, outage %v; want 4, true, 1, true", u.tally.global.Expired, u.tally.dirty, obs.n, u.outage.failing)
	}
	u.maintaining = true
	if u.reported(serviceReport{over: true}); u.maintaining {
		t.Error("the services' last report left the stop waiting for them")
	}
	if !queue.IsFenced(fencedError()) {
		t.Fatal("fencedError is not the fence's")
	}
}
