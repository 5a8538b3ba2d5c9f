package testkit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func TestMain(m *testing.M) { Main(m) }

// fakeT records what a helper reports; its Fatalf ends the goroutine, as
// testing's does, so run the helper with (*fakeT).run.
type fakeT struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  string
}

func (f *fakeT) Helper()             {}
func (f *fakeT) Logf(string, ...any) {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn on a goroutine of its own and waits for it.
func (f *fakeT) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "%d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
	var none *Buffer
	if none.String() != "" {
		t.Error("a nil Buffer is not empty")
	}
}

func TestWait(t *testing.T) {
	n := 0
	Wait(t, "the third try", time.Minute, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}

	f := &fakeT{}
	logs := &Buffer{}
	logs.Write([]byte("the dispatcher's line\n"))
	start := time.Now()
	f.run(func() {
		Wait(f, "what never comes", 100*time.Millisecond, func() bool { return false }, logs, &Buffer{})
	})
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("gave up after %v, before the deadline", d)
	}
	want := "timed out after 100ms waiting for what never comes; log:\nthe dispatcher's line\n"
	if f.fatal != want {
		t.Errorf("failure %q, want %q", f.fatal, want)
	}
}

func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, r.URL.Path)
	}))
	defer srv.Close()
	if code, body := Get(t, srv.URL+"/x"); code != http.StatusTeapot || body != "/x" {
		t.Errorf("Get: %d %q", code, body)
	}
	f := &fakeT{}
	f.run(func() { Get(f, "http://127.0.0.1:1/") })
	if !strings.HasPrefix(f.fatal, "GET http://127.0.0.1:1/: ") {
		t.Errorf("failure %q", f.fatal)
	}
}

// TestBuild: a build is made once per test binary and named for its
// package; the test worker runs.
func TestBuild(t *testing.T) {
	a := Worker(t)
	fi, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	if b := Worker(t); b != a || !strings.HasSuffix(a, "/"+WorkerName) {
		t.Errorf("second build %q, first %q", b, a)
	}
	if fj, err := os.Stat(a); err != nil || !fj.ModTime().Equal(fi.ModTime()) {
		t.Errorf("built again: %v", err)
	}
	f := &fakeT{}
	f.run(func() { Build(f, "github.com/pepsi-dev/pepsi/internal/nosuchprogram") })
	if !strings.Contains(f.fatal, "testkit: build github.com/pepsi-dev/pepsi/internal/nosuchprogram: go build") {
		t.Errorf("failure %q", f.fatal)
	}
}

// TestCheckInvariants: a clean database passes; each broken invariant is
// reported, with the first offending id.
func TestCheckInvariants(t *testing.T) {
	s := NewSite(t, "")
	if !s.Check() || !s.Check(Settled) {
		t.Fatal("an empty database fails the check")
	}
	ctx := context.Background()
	ids, err := s.DB.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: make([][]byte, 6)})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.DB.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("UPDATE pepsi.state SET status = 'running' WHERE id = ANY($1)", ids[1:3])
	exec("UPDATE pepsi.state SET status = 'failed' WHERE id = $1", ids[3])
	exec("UPDATE pepsi.state SET status = 'done' WHERE id = $1", ids[4])
	exec("DELETE FROM pepsi.state WHERE id = $1", ids[5])
	exec("UPDATE pepsi.dispatch_stats SET claimed = 9, done = 2, reset = 1")

	for _, tc := range []struct {
		checks []Check
		want   []string
	}{
		{nil, []string{
			fmt.Sprintf("2 messages left running (first: %d)", ids[1]),
			fmt.Sprintf("1 messages without a state row (first: %d)", ids[5]),
			"dispatch_stats.done = 2, rows done = 1",
			"dispatch_stats.failed = 0 (+ join_failed 0), rows failed = 1",
			"claimed 9 != done 2 + failed 0 + paused 0 + requeued 0 + reset 1 + cancelled 0",
		}},
		{[]Check{Settled, RowsOnly}, []string{
			fmt.Sprintf("3 messages not finished (first: %d, pending at a)", ids[0]),
			fmt.Sprintf("1 failed messages without a reason (first: %d)", ids[3]),
			fmt.Sprintf("1 messages without a state row (first: %d)", ids[5]),
		}},
	} {
		f := &fakeT{}
		var ok bool
		f.run(func() { ok = CheckInvariants(f, s.DB, tc.checks...) })
		if ok || f.fatal != "" || strings.Join(f.errors, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%v: ok %v, fatal %q, errors:\n%s\nwant:\n%s", tc.checks, ok, f.fatal, strings.Join(f.errors, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

func TestCheckPassedOnce(t *testing.T) {
	s := NewSite(t, "")
	s.WorkerTables()
	if _, err := s.DB.Pool.Exec(context.Background(), `INSERT INTO test_passes (id, stage, pid)
		VALUES (1, 'a', 10), (1, 'b', 10), (2, 'a', 10), (2, 'a', 11), (3, 'b', 12), (3, 'b', 13)`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		may  map[int64]bool
		want string
	}{
		{map[int64]bool{2: true, 3: true}, ""},
		{map[int64]bool{3: true}, "stage passes made twice, by messages not in flight at a fault: 2 at a ×2 by [10 11]"},
		{nil, "stage passes made twice, none may be: 2 at a ×2 by [10 11]; 3 at b ×2 by [12 13]"},
	} {
		f := &fakeT{}
		var ok bool
		f.run(func() { ok = CheckPassedOnce(f, s.DB, tc.may) })
		if got := strings.Join(f.errors, "\n"); ok != (tc.want == "") || got != tc.want {
			t.Errorf("%v: ok %v, errors %q, want %q", tc.may, ok, got, tc.want)
		}
	}
}
