package dashboard_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// countingJSON is what TestCountsOnTheirWay reads of the overview's JSON.
type countingJSON struct {
	Stages []struct {
		Stage  string           `json:"stage"`
		Counts map[string]int64 `json:"counts"`
	} `json:"stages"`
	Totals   map[string]int64 `json:"totals"`
	Counting []string         `json:"counting"`
	Banners  []struct {
		Kind string `json:"kind"`
	} `json:"banners"`
}

// TestCountsOnTheirWay: a page waits for the queue's counts a moment only
// (as served: countWait); the counts not in by then (held back here by a
// lock on their partitions) are shown as being counted, never as 0, with
// a notice while the live messages' are; the count goes on without the
// page, and the next page has it.
func TestCountsOnTheirWay(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true, countWait: true})
	s.enqueue("a", 5, []byte("x"))
	s.exec(`UPDATE pepsi.state SET status = 'done' WHERE id IN (SELECT id FROM pepsi.state ORDER BY id LIMIT 2)`)
	lock, err := pgx.Connect(ctx(t), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx(t))
	hold := func(tables string) {
		t.Helper()
		if _, err := lock.Exec(ctx(t), "BEGIN; LOCK TABLE "+tables+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
	}
	release := func() {
		t.Helper()
		if _, err := lock.Exec(ctx(t), "COMMIT"); err != nil {
			t.Fatal(err)
		}
		if err := s.dash.CountsIn(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	overview := func() (countingJSON, string) {
		t.Helper()
		var o countingJSON
		s.getJSON("/", req{}, &o)
		return o, s.get("/", http.StatusOK, req{})
	}
	counting := func(o countingJSON) bool {
		return slices.ContainsFunc(o.Banners, func(b struct {
			Kind string `json:"kind"`
		}) bool {
			return b.Kind == "counting"
		})
	}

	// The done messages held back: the live ones come in, done does not.
	hold("pepsi.state_done")
	s.get("/", http.StatusOK, req{}) // starts the count
	waitFor(t, "the live count", func() bool { _, at := s.dash.Sampled(); return !at.IsZero() })
	o, body := overview()
	if !slices.Equal(o.Counting, []string{"done"}) || len(o.Stages) != 1 || o.Stages[0].Counts["pending"] != 3 || counting(o) {
		t.Errorf("done held back: counting %v, banners %v, stages %+v", o.Counting, o.Banners, o.Stages)
	}
	if _, ok := o.Stages[0].Counts["done"]; ok {
		t.Errorf("done held back, yet counted: %v", o.Stages[0].Counts)
	}
	if _, ok := o.Totals["done"]; ok {
		t.Errorf("done held back, yet in the totals: %v", o.Totals)
	}
	if !strings.Contains(body, `<td class="n counting"><a href="/messages?stage=a&amp;status=done" class="quiet" title="being counted: the next refresh has it">counting…</a></td>`) {
		t.Errorf("the overview does not say done is being counted:\n%s", body)
	}
	release()
	o, body = overview()
	if len(o.Counting) != 0 || o.Stages[0].Counts["done"] != 2 || o.Totals["done"] != 2 || strings.Contains(body, "counting…") {
		t.Errorf("counted: counting %v, counts %v, totals %v", o.Counting, o.Stages[0].Counts, o.Totals)
	}

	// Everything held back after an action forgot the counts: every
	// count is on its way, and a notice says so.
	s.dash.ForgetCounts()
	hold("pepsi.state_live, pepsi.state_done")
	o, body = overview()
	if len(o.Counting) != 8 || !counting(o) || len(o.Stages[0].Counts) != 0 {
		t.Errorf("all held back: counting %v, banners %v, counts %v", o.Counting, o.Banners, o.Stages[0].Counts)
	}
	if !strings.Contains(body, "Counting the queue") || strings.Contains(body, `<td class="n zero"><a href="/messages?stage=a&amp;status=pending">0</a>`) {
		t.Errorf("all held back, the overview:\n%s", body)
	}
	release()
	if o, _ = overview(); len(o.Counting) != 0 || counting(o) || o.Stages[0].Counts["pending"] != 3 {
		t.Errorf("all counted: counting %v, banners %v, counts %v", o.Counting, o.Banners, o.Stages[0].Counts)
	}
}
