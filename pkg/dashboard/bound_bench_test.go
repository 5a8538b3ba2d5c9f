package dashboard_test

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// BenchmarkConfirm times the confirmation of a cancel of 100 000 pending
// messages (of 300 000, at three stages), which binds their ids (see
// bind.go), beside the count alone that a confirmation made before, and
// the memory the bound ids take in pepsi httpd; then the cancel of them,
// by the ids bound, beside one by the filter alone.
//
//	make bench-go PKGS=./pkg/dashboard/ BENCH=Confirm
func BenchmarkConfirm(b *testing.B) {
	s := newSite(b, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"a", "b", "c"}})
	const n, batch = 100_000, 10_000
	ps := slices.Repeat([][]byte{[]byte("x")}, batch)
	for i := range 3 * n / batch {
		if _, err := s.db.EnqueueBulk(ctx(b), queue.Bulk{Stage: []string{"a", "b", "c"}[i%3], Payloads: ps}); err != nil {
			b.Fatal(err)
		}
	}
	s.exec(`VACUUM ANALYZE pepsi.state`)
	adb, err := admin.Open(ctx(b), s.dsn, queue.Options{App: pgtest.App})
	if err != nil {
		b.Fatal(err)
	}
	defer adb.Close()
	sel := admin.Selection{Stage: "b", Status: queue.Pending}
	form := url.Values{"scope": {"filter"}, "stage": {"b"}, "status": {"pending"}, "format": {"json"}}
	var page struct {
		Count        int64  `json:"count"`
		Confirmation string `json:"confirmation"`
	}
	timed := func(what string, f func()) {
		start := time.Now()
		f()
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, what+"-ms")
	}
	for b.Loop() {
		timed("count", func() {
			if c, _, err := adb.CountSelection(ctx(b), sel, 0); err != nil || c != n {
				b.Fatalf("count: %d, %v", c, err)
			}
		})
		timed("bind", func() {
			if ids, _, err := adb.BindSelection(ctx(b), sel, []queue.Status{queue.Pending}, false, 1_000_000); err != nil || len(ids) != n {
				b.Fatalf("bind: %d, %v", len(ids), err)
			}
		})
		before := s.dash.ConfirmBytes()
		timed("confirmation", func() { postJSON(b, s, "/cancel", form, &page) })
		if page.Count != n {
			b.Fatalf("confirmed %d", page.Count)
		}
		b.ReportMetric(float64(s.dash.ConfirmBytes()-before)/1000, "kept-kB")
	}
	f := url.Values{"scope": {"filter"}, "stage": {"b"}, "status": {"pending"}, "confirm": {"yes"}, "confirmation": {page.Confirmation}}
	timed("cancel", func() {
		if r := s.do("POST", "/cancel", f, req{user: "alice", pass: alicePass, noFollow: true}); r.code != http.StatusSeeOther {
			b.Fatalf("cancel: %d\n%s", r.code, r.body)
		}
	})
	// The same without a confirmation: by status and stage, as pepsi
	// queue cancel does, what an action was before it was bound.
	f = url.Values{"scope": {"filter"}, "stage": {"c"}, "status": {"pending"}, "confirm": {"yes"}}
	timed("cancel-unbound", func() {
		if r := s.do("POST", "/cancel", f, req{user: "alice", pass: alicePass, noFollow: true}); r.code != http.StatusSeeOther {
			b.Fatalf("cancel: %d\n%s", r.code, r.body)
		}
	})
}
