package admin_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestTextPayload: the database's test of a text payload agrees with Go's
// (UTF-8 without a NUL byte) on every edge of UTF-8 and on random bytes.
func TestTextPayload(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	cases := [][]byte{
		{}, []byte("plain ascii"), []byte(`back\slash \\ \000`), []byte("é—💥"), {0}, []byte("a\x00b"),
		{0x7f}, {0x80}, {0xbf}, {0xc0, 0x80}, {0xc1, 0xbf}, {0xc2, 0x80}, {0xdf, 0xbf}, {0xc2}, {0xc2, 0xc0},
		{0xe0, 0x9f, 0x80}, {0xe0, 0xa0, 0x80}, {0xed, 0x9f, 0xbf}, {0xed, 0xa0, 0x80}, {0xef, 0xbf, 0xbf}, {0xe1, 0x80},
		{0xf0, 0x8f, 0xbf, 0xbf}, {0xf0, 0x90, 0x80, 0x80}, {0xf4, 0x8f, 0xbf, 0xbf}, {0xf4, 0x90, 0x80, 0x80},
		{0xf5, 0x80, 0x80, 0x80}, {0xff}, {0xfe, 0xff}, []byte("ok \xe2\x82"),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			// Mostly bytes of multibyte sequences, so that some are valid.
			b[i] = byte(0x80 + r.IntN(0x80))
			if r.IntN(4) == 0 {
				b[i] = byte(r.IntN(0x80))
			}
		}
		cases = append(cases, b)
	}
	rows, err := db.Pool.Query(ctx, `SELECT encode(b, 'escape') ~ $2 FROM unnest($1::bytea[]) WITH ORDINALITY u(b, n) ORDER BY n`,
		cases, admin.TextPayloadRE)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		t.Fatal(err)
	}
	valid := 0
	for i, b := range cases {
		want := utf8.Valid(b) && !bytes.Contains(b, []byte{0})
		if got[i] != want {
			t.Errorf("% x: the database says text %v, Go %v", b, got[i], want)
		}
		if want {
			valid++
		}
	}
	if valid < 50 {
		t.Errorf("only %d of the cases are text", valid)
	}
}

// TestSearch: the header and payload filters of Browse, List, the
// selections' counts and repairs, within their time bound: a header's
// value (exact, every header given), text in a text payload only (bytes,
// case counts), messages enqueued before the bound never found, a default
// bound of a day; the repair of a search changes what its count counted;
// a search that runs out of time says so.
func TestSearch(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	enqueue := func(headers map[string]string, payload string) int64 {
		t.Helper()
		ids, err := db.Store.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Headers: headers, Payloads: [][]byte{[]byte(payload)}})
		if err != nil {
			t.Fatal(err)
		}
		admit(t, db)
		return ids[0]
	}
	old := enqueue(map[string]string{"tenant": "acme"}, `{"order": 1234}`)  // enqueued 3 days ago
	yday := enqueue(map[string]string{"tenant": "acme"}, `{"order": 1234}`) // 30 hours ago
	acme := enqueue(map[string]string{"tenant": "acme", "k": "v"}, `{"order": 1234, "sku": "é"}`)
	other := enqueue(map[string]string{"tenant": "other"}, `{"order": 12345}`)
	binary := enqueue(map[string]string{"tenant": "acme"}, "\xff\xfe order 1234")
	nul := enqueue(nil, "order 1234\x00")
	bs := enqueue(nil, `back\slash`)
	exec(t, db, "UPDATE pepsi.message SET created_at = now() - interval '3 days' WHERE id = $1", old)
	exec(t, db, "UPDATE pepsi.message SET created_at = now() - interval '30 hours' WHERE id = $1", yday)
	exec(t, db, "UPDATE pepsi.state SET status = 'failed', error = 'no' WHERE id = ANY($1)", []int64{old, yday, acme, other, binary})

	acmeH := []admin.Header{{"tenant", "acme"}}
	for _, tc := range []struct {
		name string
		s    admin.Search
		want []int64
	}{
		{"header, a day by default", admin.Search{Headers: acmeH}, []int64{acme, binary}},
		{"header, 2 days", admin.Search{Headers: acmeH, Since: 48 * time.Hour}, []int64{yday, acme, binary}},
		{"header, 4 days", admin.Search{Headers: acmeH, Since: 96 * time.Hour}, []int64{old, yday, acme, binary}},
		{"every header", admin.Search{Headers: []admin.Header{{"tenant", "acme"}, {"k", "v"}}}, []int64{acme}},
		{"a header's value is exact", admin.Search{Headers: []admin.Header{{"tenant", "acm"}}}, nil},
		{"an empty value is not a missing header", admin.Search{Headers: []admin.Header{{"k", ""}}}, nil},
		{"payload text, not in binary or NUL payloads", admin.Search{Payload: "order\": 1234"}, []int64{acme, other}},
		{"payload, non-ASCII", admin.Search{Payload: "é"}, []int64{acme}},
		{"payload, case counts", admin.Search{Payload: "ORDER"}, nil},
		{"payload and header", admin.Search{Payload: "1234", Headers: []admin.Header{{"tenant", "other"}}}, []int64{other}},
		{"since alone", admin.Search{Since: 31 * time.Hour}, []int64{yday, acme, other, binary, nul, bs}},
		{"payload, a backslash (text not ASCII-only in its encoding)", admin.Search{Payload: `k\s`}, []int64{bs}},
	} {
		page, err := db.Browse(ctx, admin.BrowseParams{Search: tc.s})
		if err != nil {
			t.Errorf("%s: Browse: %v", tc.name, err)
			continue
		}
		want := slices.Clone(tc.want)
		slices.Reverse(want)
		if got := pageIDs(page); !slices.Equal(got, want) {
			t.Errorf("%s: Browse = %v, want %v", tc.name, got, want)
		}
		rows, err := db.List(ctx, admin.ListParams{Search: tc.s})
		var got []int64
		for _, r := range rows {
			got = append(got, r.ID)
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: List = %v, %v, want %v", tc.name, got, err, tc.want)
		}
		if n, _, err := db.CountSelection(ctx, admin.Selection{Search: tc.s}, 0); err != nil || n != int64(len(tc.want)) {
			t.Errorf("%s: CountSelection = %d, %v, want %d", tc.name, n, err, len(tc.want))
		}
	}

	// A page of the list, and the next one, within the window.
	p1, err := db.Browse(ctx, admin.BrowseParams{Search: admin.Search{Headers: acmeH, Since: 96 * time.Hour}, Limit: 2})
	if err != nil || !slices.Equal(pageIDs(p1), []int64{binary, acme}) || !p1.Older {
		t.Fatalf("first page = %v, %v", pageIDs(p1), err)
	}
	p2, err := db.Browse(ctx, admin.BrowseParams{Search: admin.Search{Headers: acmeH, Since: 96 * time.Hour}, Limit: 2, Before: acme})
	if err != nil || !slices.Equal(pageIDs(p2), []int64{yday, old}) || p2.Older {
		t.Fatalf("second page = %v, %v", pageIDs(p2), err)
	}

	// A retry of a search: what the dry run counts, and only that.
	sel := admin.Selection{Status: queue.Failed, Search: admin.Search{Payload: "1234", Headers: acmeH, Since: 48 * time.Hour}}
	dry, err := db.RedriveSelection(ctx, sel, "", nil, true)
	if err != nil || dry.Changed != 2 {
		t.Fatalf("dry run = %+v, %v; want 2 (yday, acme)", dry, err)
	}
	res, err := db.RedriveSelection(ctx, sel, "", nil, false)
	if err != nil || res.Changed != dry.Changed {
		t.Fatalf("retry = %+v, %v; want %d", res, err, dry.Changed)
	}
	for id, want := range map[int64]queue.Status{old: queue.Failed, yday: queue.Pending, acme: queue.Pending, other: queue.Failed, binary: queue.Failed} {
		if st := getState(t, db, id); st.Status != want {
			t.Errorf("message %d after the retry: %s, want %s", id, st.Status, want)
		}
	}
	// A purge of a search, and the ids of one.
	psel := admin.Selection{Status: queue.Failed, Search: admin.Search{Headers: acmeH, Since: 96 * time.Hour}}
	if ids, more, err := db.SelectionIDs(ctx, psel, 10); err != nil || more || !slices.Equal(ids, []int64{old, binary}) {
		t.Errorf("SelectionIDs = %v, %v, %v", ids, more, err)
	}
	if res, err := db.PurgeSelection(ctx, psel, false); err != nil || res.Changed != 2 {
		t.Errorf("purge = %+v, %v; want 2", res, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", []int64{old, binary, other}); n != 1 {
		t.Errorf("%d of old, binary and other left, want other only", n)
	}

	// Out of time: the messages' table locked, the search waits, and
	// stops at its limit.
	defer func(d time.Duration) { admin.SearchTimeout = d }(admin.SearchTimeout)
	admin.SearchTimeout = 200 * time.Millisecond
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the test's own lock
	if _, err := tx.Exec(ctx, "LOCK TABLE pepsi.message IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Browse(ctx, admin.BrowseParams{Search: admin.Search{Payload: "x", Since: time.Hour}}); !errors.Is(err, admin.ErrSearchTimeout) {
		t.Errorf("Browse of a locked table: %v, want ErrSearchTimeout", err)
	}
	if _, err := db.RedriveSelection(ctx, admin.Selection{Search: admin.Search{Headers: acmeH, Since: time.Hour}}, "", nil, false); !errors.Is(err, admin.ErrSearchTimeout) {
		t.Errorf("a retry of a search on a locked table: %v, want ErrSearchTimeout", err)
	}
}

// TestFromID: the first id of a window, by bisection: every message
// enqueued within it and none before, with gaps in the ids; past the
// newest message when none is that recent.
func TestFromID(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	if id, err := db.FromID(ctx, admin.Search{Since: time.Hour}); err != nil || id != 1 {
		t.Errorf("FromID of no message = %d, %v, want 1", id, err)
	}
	ids := seed(t, db, "a", queue.Done, 300)
	// Message i was enqueued 300-i hours ago; every third one is gone.
	exec(t, db, "UPDATE pepsi.message SET created_at = now() - ($2 - id) * interval '1 hour' WHERE id = ANY($1)", ids, ids[len(ids)-1]+1)
	exec(t, db, "DELETE FROM pepsi.message WHERE id % 3 = 0 AND id = ANY($1)", ids)
	for _, hours := range []int{1, 2, 3, 10, 100, 299, 300, 400} {
		since := time.Duration(hours)*time.Hour + time.Minute
		got, err := db.FromID(ctx, admin.Search{Since: since})
		if err != nil {
			t.Fatal(err)
		}
		// The ids from it are exactly the messages enqueued within the bound.
		if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE (id >= $1) <> (created_at >= now() - $2::interval)", got, since); n != 0 {
			t.Errorf("FromID(%v) = %d: %d messages on the wrong side of it", since, got, n)
		}
		if hours >= 3 && (got <= ids[0] && hours < 300 || count(t, db, "SELECT count(*) FROM pepsi.message WHERE id >= $1", got) == 0) {
			t.Errorf("FromID(%v) = %d: want a window of some of the messages", since, got)
		}
	}
	last := ids[len(ids)-2] // 300 is gone
	if id, err := db.FromID(ctx, admin.Search{Since: time.Second}); err != nil || id <= last {
		t.Errorf("FromID of a second = %d, %v, want past the newest, %d", id, err, last)
	}
	if id, err := db.FromID(ctx, admin.Search{}); err != nil || id != 0 {
		t.Errorf("FromID without a bound = %d, %v, want 0", id, err)
	}
}
