package dispatch

// Database-free tests of the retention service's walk, on a fake store:
// what it asks of the store and what it reports, not what the SQL does
// (TestRetention and TestRetentionMessageRanges run it on a database).

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// fakeRetention is a retentionStore whose walks are one batch each.
type fakeRetention struct {
	seq       int64   // the id sequence MessageAhead reports
	widths    []int64 // the width each MessageAhead was asked for
	expired   int64   // what each ExpireDone deletes
	expireErr []error // what the next ExpireDone calls fail with, in order
	retireErr error
}

func (f *fakeRetention) Reset() {}

func (f *fakeRetention) DoneAhead(context.Context, time.Duration, int) (int, error) { return 1, nil }

func (f *fakeRetention) MessageAhead(_ context.Context, width int64, _ int) (int, int64, error) {
	f.widths = append(f.widths, width)
	return 0, f.seq, nil
}

func (f *fakeRetention) ExpireDone(context.Context, queue.ExpireAt, time.Duration, int) (queue.ExpireAt, int64, bool, error) {
	if len(f.expireErr) > 0 {
		err := f.expireErr[0]
		f.expireErr = f.expireErr[1:]
		return queue.ExpireAt{}, 0, false, err
	}
	return queue.ExpireAt{}, f.expired, false, nil
}

func (f *fakeRetention) RetireMessages(context.Context, int, int) (int, int64, error) {
	return 0, 0, f.retireErr
}

// newRetention is a retention service of RETENTION keep on f, its clock
// at *at, its log and its reports.
func newRetention(f *fakeRetention, keep time.Duration, at *time.Time) (*retention, *testkit.Buffer, chan serviceReport) {
	log := &testkit.Buffer{}
	reports := make(chan serviceReport, 16)
	r := &retention{store: f, log: slog.New(slog.NewTextHandler(log, nil)), now: func() time.Time { return *at },
		keep: keep, retry: backoff{min: time.Millisecond, max: time.Millisecond}, report: reports}
	return r, log, reports
}

// The retention sweep sizes the ranges of message ids by the ids drawn
// between two walks: the first walk cannot, so a second follows a second
// later; after that, a range holds what one span (RETENTION/4) draws. A
// failed retire of emptied ranges is logged, and the walk's deletions are
// reported all the same.
func TestRetentionMessageWidth(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	f := &fakeRetention{expired: 3}
	r, log, reports := newRetention(f, time.Minute, &at)
	walk := func(seq int64) time.Duration {
		t.Helper()
		f.seq = seq
		next, ok := r.walk(context.Background(), context.Background())
		if !ok {
			t.Fatal("the walk stopped")
		}
		return next
	}
	if next := walk(1000); f.widths[0] != 0 || next != time.Second {
		t.Errorf("first walk: ranges of %d ids, next in %v; want the last one's width (0), a second", f.widths[0], next)
	}
	at = at.Add(time.Second)
	next := walk(1500)
	if f.widths[1] != 0 || next != doneWidth(time.Minute) {
		t.Errorf("second walk: ranges of %d ids, next in %v; want 0 (no rate measured before it), a span", f.widths[1], next)
	}
	// 500 ids a second, a span of 15 s.
	at = at.Add(next)
	f.retireErr = errors.New("lock timeout")
	walk(9000)
	if f.widths[2] != 7500 {
		t.Errorf("third walk: ranges of %d ids, want 7 500", f.widths[2])
	}
	var expired int64
	for len(reports) > 0 {
		rep := <-reports
		if rep.err != nil {
			t.Errorf("a walk reported %v", rep.err)
		}
		expired += rep.expired
	}
	if expired != 9 {
		t.Errorf("reported %d expired, want 9", expired)
	}
	if !strings.Contains(log.String(), "retention: ranges of messages not dropped") {
		t.Errorf("no warning for the failed retire: %s", log)
	}
}

// A failed batch is logged, reported to the loop (a queue retry) and
// tried again after the backoff; a batch the fence refused is logged as such.
func TestRetentionRetries(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	fenced := fencedError()
	f := &fakeRetention{expired: 2, expireErr: []error{errors.New("connection refused"), fenced}}
	r, log, reports := newRetention(f, time.Minute, &at)
	if _, ok := r.walk(context.Background(), context.Background()); !ok {
		t.Fatal("the walk stopped")
	}
	var got []serviceReport
	for len(reports) > 0 {
		got = append(got, <-reports)
	}
	if len(got) != 3 || got[0].err == nil || !errors.Is(got[1].err, fenced) || got[2].expired != 2 {
		t.Fatalf("reports %+v, want two failures, then 2 expired", got)
	}
	if !strings.Contains(log.String(), "database: retention sweep failed; retrying") ||
		!strings.Contains(log.String(), "database: retention sweep refused: the lock session is gone") {
		t.Errorf("log: %s", log)
	}

	// A stop during the backoff ends the walk.
	f.expireErr = []error{errors.New("connection refused")}
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := r.walk(context.Background(), stop); ok {
		t.Error("a stopped walk went on")
	}
}
