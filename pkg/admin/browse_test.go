package admin_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// ids returns the ids of a page's rows.
func pageIDs(p admin.BrowsePage) []int64 {
	out := make([]int64, len(p.Rows))
	for i, r := range p.Rows {
		out[i] = r.ID
	}
	return out
}

// TestBrowse: filters, newest first, keyset pages both ways, errors cut.
func TestBrowse(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	done := seed(t, db, "a", queue.Done, 30)
	failed := seed(t, db, "a", queue.Failed, 7)
	other := seed(t, db, "b", queue.Failed, 3)
	long := make([]byte, 1000)
	for i := range long {
		long[i] = 'x'
	}
	exec(t, db, `UPDATE pepsi.state SET error = 'order ' || id || ': No stock' WHERE id = ANY($1)`, failed[:5])
	exec(t, db, `UPDATE pepsi.state SET dispatch_error = 'exit 3 # crashed' WHERE id = ANY($1)`, failed[5:])
	exec(t, db, `UPDATE pepsi.state SET error = $2 WHERE id = ANY($1)`, other, string(long))
	exec(t, db, `UPDATE pepsi.state SET error = 'disk 100% full_\' WHERE id = $1`, done[0])
	exec(t, db, `UPDATE pepsi.state SET updated_at = now() - interval '2 hours' WHERE id = ANY($1)`, done[:10])

	browse := func(p admin.BrowseParams) admin.BrowsePage {
		t.Helper()
		page, err := db.Browse(ctx, p)
		if err != nil {
			t.Fatalf("Browse(%+v): %v", p, err)
		}
		return page
	}
	desc := func(ids []int64) []int64 {
		out := slices.Clone(ids)
		slices.Reverse(out)
		return out
	}

	// Every message, three pages of 15 down and back up.
	all := desc(slices.Concat(done, failed, other))
	p1 := browse(admin.BrowseParams{Limit: 15})
	if !slices.Equal(pageIDs(p1), all[:15]) || !p1.Older || p1.Newer {
		t.Errorf("page 1: %v older %v newer %v", pageIDs(p1), p1.Older, p1.Newer)
	}
	p2 := browse(admin.BrowseParams{Limit: 15, Before: p1.Rows[14].ID})
	if !slices.Equal(pageIDs(p2), all[15:30]) || !p2.Older || !p2.Newer {
		t.Errorf("page 2: %v older %v newer %v", pageIDs(p2), p2.Older, p2.Newer)
	}
	p3 := browse(admin.BrowseParams{Limit: 15, Before: p2.Rows[14].ID})
	if !slices.Equal(pageIDs(p3), all[30:]) || p3.Older || !p3.Newer {
		t.Errorf("page 3: %v older %v newer %v", pageIDs(p3), p3.Older, p3.Newer)
	}
	back := browse(admin.BrowseParams{Limit: 15, After: p3.Rows[0].ID})
	if !slices.Equal(pageIDs(back), all[15:30]) || !back.Newer || !back.Older {
		t.Errorf("back from page 3: %v older %v newer %v", pageIDs(back), back.Older, back.Newer)
	}
	top := browse(admin.BrowseParams{Limit: 15, After: back.Rows[0].ID})
	if !slices.Equal(pageIDs(top), all[:15]) || top.Newer {
		t.Errorf("back to the top: %v newer %v", pageIDs(top), top.Newer)
	}

	for _, tc := range []struct {
		name string
		p    admin.BrowseParams
		want []int64
	}{
		{"stage", admin.BrowseParams{Stage: "b"}, desc(other)},
		{"status", admin.BrowseParams{Status: queue.Failed, Stage: "a"}, desc(failed)},
		{"older", admin.BrowseParams{OlderThan: time.Hour}, desc(done[:10])},
		{"newer", admin.BrowseParams{NewerThan: time.Hour, Status: queue.Done}, desc(done[10:])},
		{"text, any case, in error", admin.BrowseParams{Text: "no STOCK"}, desc(failed[:5])},
		{"text in dispatch_error", admin.BrowseParams{Text: "# crash"}, desc(failed[5:])},
		{"text with LIKE's characters", admin.BrowseParams{Text: `0% FULL_\`}, done[:1]},
		{"LIKE's characters are not wild", admin.BrowseParams{Text: `0%_`}, nil},
		{"reason", admin.BrowseParams{Reason: "order N: No stock", Status: queue.Failed}, desc(failed[:5])},
		{"reason of the dispatcher", admin.BrowseParams{Reason: "exit N # crashed"}, desc(failed[5:])},
		{"reason with LIKE's characters", admin.BrowseParams{Reason: `disk N% full_\`}, done[:1]},
		{"a reason's N is digits or N, nothing else", admin.BrowseParams{Reason: `disk N% fullN\`}, nil},
		{"nothing", admin.BrowseParams{Stage: "nowhere"}, nil},
	} {
		got := browse(tc.p)
		if !slices.Equal(pageIDs(got), tc.want) || got.Older || got.Newer {
			t.Errorf("%s: %v (older %v newer %v), want %v", tc.name, pageIDs(got), got.Older, got.Newer, tc.want)
		}
	}
	if e := *browse(admin.BrowseParams{Stage: "b"}).Rows[0].Error; utf8.RuneCountInString(e) != admin.MaxErrorList || !strings.HasSuffix(e, "…") {
		t.Errorf("error not cut to %d characters ending in …: %d", admin.MaxErrorList, utf8.RuneCountInString(e))
	}
	if _, err := db.Browse(ctx, admin.BrowseParams{Status: "lost"}); err == nil {
		t.Error("unknown status accepted")
	}
	if js, _ := json.Marshal(browse(admin.BrowseParams{Stage: "nowhere"})); string(js) != `{"rows":[],"older":false,"newer":false}` {
		t.Errorf("empty page as JSON: %s", js)
	}
}

// TestFailureGroups: by stage and folded reason, the largest first; a
// group's redrive takes that group alone.
func TestFailureGroups(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	a := seed(t, db, "a", queue.Failed, 6)
	b := seed(t, db, "b", queue.Failed, 2)
	seed(t, db, "a", queue.Done, 3)
	none := seed(t, db, "c", queue.Failed, 1)
	exec(t, db, `UPDATE pepsi.state SET error = 'order ' || id || ' rejected' WHERE id = ANY($1)`, a[:4])
	exec(t, db, `UPDATE pepsi.state SET dispatch_error = 'timeout after 300s' WHERE id = ANY($1)`, a[4:])
	exec(t, db, `UPDATE pepsi.state SET error = 'order 1 rejected' WHERE id = ANY($1)`, b)

	groups, err := db.FailureGroups(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	type g struct {
		stage, reason string
		n, newest     int64
	}
	var got []g
	for _, x := range groups {
		got = append(got, g{x.Stage, x.Reason, x.Count, x.NewestID})
		if x.Newest.IsZero() {
			t.Errorf("%+v: no newest time", x)
		}
	}
	want := []g{{"a", "order N rejected", 4, a[3]}, {"a", "timeout after Ns", 2, a[5]}, {"b", "order N rejected", 2, b[1]}, {"c", "(none)", 1, none[0]}}
	if !slices.Equal(got, want) {
		t.Errorf("groups:\n got %v\nwant %v", got, want)
	}
	if groups, err := db.FailureGroups(ctx, "b", 0); err != nil || len(groups) != 1 {
		t.Errorf("stage b: %v, %v", groups, err)
	}
	for _, tc := range []struct {
		err, derr *string
		want      string
	}{
		{nil, new("timeout after 300s"), "timeout after Ns"},
		{new(""), new("exit 2"), "exit N"},
		{new("bad 1 2"), new("exit 2"), "bad N N"},
		{nil, nil, "(none)"},
	} {
		if r := admin.FoldReason(tc.err, tc.derr); r != tc.want {
			t.Errorf("FoldReason(%v, %v) = %q, want %q", tc.err, tc.derr, r, tc.want)
		}
	}

	// The group's dry run counts it; its redrive retries it alone.
	p := admin.RedriveParams{Status: queue.Failed, Stage: "a", Reason: "order N rejected", DryRun: true}
	if res, err := db.Redrive(ctx, p); err != nil || res.Changed != 4 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if st := statuses(t, db, a); st[0] != queue.Failed {
		t.Fatalf("the dry run changed rows: %v", st)
	}
	p.DryRun = false
	if res, err := db.Redrive(ctx, p); err != nil || res.Changed != 4 {
		t.Fatalf("redrive: %+v, %v", res, err)
	}
	want2 := []queue.Status{queue.Pending, queue.Pending, queue.Pending, queue.Pending, queue.Failed, queue.Failed}
	if st := statuses(t, db, a); !slices.Equal(st, want2) {
		t.Errorf("after the group's redrive, stage a: %v", st)
	}
	if st := statuses(t, db, b); !slices.Equal(st, []queue.Status{queue.Failed, queue.Failed}) {
		t.Errorf("stage b was touched: %v", st)
	}
	if _, err := db.Redrive(ctx, admin.RedriveParams{IDs: a[:1], DryRun: true}); err == nil {
		t.Error("a dry run by id was accepted")
	}
}

func TestPayloadHead(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	ids, err := db.Store.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: [][]byte{[]byte("0123456789")}})
	if err != nil {
		t.Fatal(err)
	}
	head, size, err := db.PayloadHead(ctx, ids[0], 4)
	if err != nil || string(head) != "0123" || size != 10 {
		t.Errorf("PayloadHead: %q %d %v", head, size, err)
	}
	if _, _, err := db.PayloadHead(ctx, ids[0]+1, 4); err != admin.ErrNotFound {
		t.Errorf("missing id: %v", err)
	}
}
