package admin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func rowIDs(rs []admin.Row) []int64 {
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

// TestCounts: per stage and status, with the oldest update; what
// pepsi.enqueue() wrote and no one has admitted yet counts as pending at
// its stage.
func TestCounts(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	if cs, err := db.Counts(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("Counts on an empty queue: %v, %v", cs, err)
	}
	seed(t, db, "b", queue.Pending, 3)
	seed(t, db, "a", queue.Failed, 2)
	seed(t, db, "a", queue.Pending, 1)
	seed(t, db, "b", queue.Running, 4)
	seed(t, db, "a", queue.Pending, 2)
	old := seed1(t, db, "a", queue.Done)
	exec(t, db, "UPDATE pepsi.state SET updated_at = '2001-02-03T04:05:06Z' WHERE id = $1", old)
	seed(t, db, "a", queue.Done, 1)
	exec(t, db, "SELECT pepsi.enqueue(s, 'x', '{}') FROM unnest(ARRAY['b', 'c', 'c']) s")
	if n := count(t, db, "SELECT count(*) FROM pepsi.ingress"); n != 3 {
		t.Fatalf("%d rows in pepsi.ingress, want 3", n)
	}

	cs, err := db.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		stage string
		st    queue.Status
	}
	want := []struct {
		key
		n int64
	}{{key{"a", queue.Done}, 2}, {key{"a", queue.Failed}, 2}, {key{"a", queue.Pending}, 3}, {key{"b", queue.Pending}, 4}, {key{"b", queue.Running}, 4},
		{key{"c", queue.Pending}, 2}}
	if len(cs) != len(want) {
		t.Fatalf("Counts = %+v, want %d groups", cs, len(want))
	}
	for i, w := range want {
		if c := cs[i]; c.Stage != w.stage || c.Status != w.st || c.N != w.n || c.Oldest.IsZero() {
			t.Fatalf("Counts[%d] = %+v, want %s/%s = %d", i, c, w.stage, w.st, w.n)
		}
	}
	if oldest := cs[0].Oldest; !oldest.Equal(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)) {
		t.Fatalf("oldest done at a = %v, want the earliest updated_at", oldest)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	a1 := seed(t, db, "a", queue.Pending, 3)
	b1 := seed(t, db, "b", queue.Pending, 2)
	a2 := seed(t, db, "a", queue.Failed, 2)
	b2 := seed(t, db, "b", queue.Done, 2)
	a3 := seed(t, db, "a", queue.Pending, 2)
	all := slices.Concat(a1, b1, a2, b2, a3)
	exec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '2 hours' WHERE id = ANY($1)", []int64{a1[1], b2[0], a3[1]})
	exec(t, db, "UPDATE pepsi.state SET error = 'e', dispatch_error = 'd' WHERE id = $1", a2[0])

	for _, tc := range []struct {
		name string
		p    admin.ListParams
		want []int64
	}{
		{"all", admin.ListParams{}, all},
		{"stage", admin.ListParams{Stage: "a"}, slices.Concat(a1, a2, a3)},
		{"status", admin.ListParams{Status: queue.Pending}, slices.Concat(a1, b1, a3)},
		{"stage and status", admin.ListParams{Stage: "a", Status: queue.Pending}, slices.Concat(a1, a3)},
		{"older than", admin.ListParams{OlderThan: time.Hour}, []int64{a1[1], b2[0], a3[1]}},
		{"older than and status", admin.ListParams{OlderThan: time.Hour, Status: queue.Done}, []int64{b2[0]}},
		{"after id", admin.ListParams{AfterID: b1[1]}, slices.Concat(a2, b2, a3)},
		{"limit", admin.ListParams{Limit: 4}, all[:4]},
		{"after id and limit", admin.ListParams{AfterID: all[2], Limit: 3}, all[3:6]},
		{"stage, after id and limit", admin.ListParams{Stage: "b", AfterID: b1[0], Limit: 2}, []int64{b1[1], b2[0]}},
		{"no match", admin.ListParams{Stage: "zzz"}, nil},
		{"unknown status", admin.ListParams{Status: queue.Paused}, nil},
	} {
		rows, err := db.List(ctx, tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := rowIDs(rows); !slices.Equal(got, tc.want) {
			t.Errorf("%s: List(%+v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}

	// Paging with AfterID walks everything once, in id order.
	var paged []int64
	after := int64(0)
	for {
		rows, err := db.List(ctx, admin.ListParams{AfterID: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			break
		}
		paged = append(paged, rowIDs(rows)...)
		after = rows[len(rows)-1].ID
	}
	if !slices.Equal(paged, all) {
		t.Fatalf("paged %v, want %v", paged, all)
	}

	// The row carries the state.
	rows, err := db.List(ctx, admin.ListParams{Status: queue.Failed, Limit: 1})
	if err != nil || len(rows) != 1 {
		t.Fatalf("%v %v", rows, err)
	}
	r := rows[0]
	if r.ID != a2[0] || r.Stage != "a" || r.Status != queue.Failed || deref(r.Error) != "e" || deref(r.DispatchError) != "d" ||
		r.CreatedAt.IsZero() || r.UpdatedAt.IsZero() || r.Timeout != nil {
		t.Fatalf("row = %+v", r)
	}
}

func TestShowAndPayload(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	payload := append([]byte("bin\x00ary"), 0xff, 0xfe)
	id, err := queue.Enqueue(ctx, db.Pool, "a", payload, map[string]string{"trace": "t-9", "k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	admit(t, db)
	exec(t, db, "UPDATE pepsi.state SET status = 'running', attempts = 2 WHERE id = $1", id)
	exec(t, db, "SELECT pepsi.pause($1, '1 minute')", id)

	m, err := db.Show(ctx, id)
	if err != nil {
		t.Fatalf("Show: %v", err)
	}
	if m.ID != id || m.Stage != "a" || m.Status != queue.Paused || m.Attempts != 2 || m.Timeout == nil ||
		m.CreatedAt.IsZero() || m.PayloadSize != len(payload) {
		t.Fatalf("Show = %+v", m)
	}
	var h map[string]string
	if err := json.Unmarshal(m.Headers, &h); err != nil || len(h) != 2 || h["trace"] != "t-9" || h["k"] != "v" {
		t.Fatalf("headers %s: %v", m.Headers, err)
	}
	p, err := db.Payload(ctx, id)
	if err != nil || !bytes.Equal(p, payload) {
		t.Fatalf("Payload = %x, %v; want %x", p, err, payload)
	}

	// Empty payload and headers.
	id2, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	admit(t, db)
	m, err = db.Show(ctx, id2)
	if err != nil || m.PayloadSize != 0 || string(m.Headers) != "{}" {
		t.Fatalf("Show empty: %+v, %v", m, err)
	}
	if p, err := db.Payload(ctx, id2); err != nil || len(p) != 0 {
		t.Fatalf("Payload empty: %x, %v", p, err)
	}

	if m, err := db.Show(ctx, 1<<40); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Show missing: %+v, %v; want ErrNotFound", m, err)
	}
	if p, err := db.Payload(ctx, 1<<40); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Payload missing: %x, %v; want ErrNotFound", p, err)
	}
	exec(t, db, "DELETE FROM pepsi.message WHERE id = $1", id)
	if _, err := db.Show(ctx, id); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Show deleted: %v; want ErrNotFound", err)
	}
}
