package admin_test

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// fanOut makes a running message at split spawn n children pending at
// work, through the SQL API, and returns it and them; with join, it then
// waits at merge.
func fanOut(t *testing.T, db *testDB, n int, join bool) (int64, []int64) {
	t.Helper()
	parent := seed1(t, db, "split", queue.Running)
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte{byte('a' + i)}
	}
	exec(t, db, "SELECT pepsi.spawn_many($1, 'work', $2::bytea[])", parent, payloads)
	if join {
		exec(t, db, "SELECT pepsi.join($1, 'merge')", parent)
	}
	return parent, childIDs(t, db, parent)
}

// childIDs lists pepsi.children(parent)'s ids.
func childIDs(t *testing.T, db *testDB, parent int64) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(testCtx(t), "SELECT id FROM pepsi.children($1)", parent)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestGraphShow: Show gives a child its parent and a parent its children
// by status, with a few open and failed ids, and a finished message its
// result.
func TestGraphShow(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	parent, kids := fanOut(t, db, 3, true)
	exec(t, db, "UPDATE pepsi.state SET status = 'done', result = 'hello' WHERE id = $1", kids[0])
	exec(t, db, "UPDATE pepsi.state SET status = 'failed', error = 'no' WHERE id = $1", kids[1])

	m, err := db.Show(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != queue.Waiting || m.Stage != "merge" || m.Parent != nil || m.Result != nil {
		t.Fatalf("parent: %s at %s, parent %+v, result %+v", m.Status, m.Stage, m.Parent, m.Result)
	}
	c := m.Children
	if c == nil || c.Total != 3 || c.ByStatus[queue.Done] != 1 || c.ByStatus[queue.Failed] != 1 || c.ByStatus[queue.Pending] != 1 {
		t.Fatalf("children: %+v", c)
	}
	if !slices.Equal(c.Open, kids[2:]) || !slices.Equal(c.Failed, kids[1:2]) {
		t.Fatalf("open %v, failed %v; want %v, %v", c.Open, c.Failed, kids[2:], kids[1:2])
	}

	k, err := db.Show(ctx, kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if k.Parent == nil || *k.Parent != (admin.Relative{ID: parent, Stage: "merge", Status: queue.Waiting}) || k.Children != nil {
		t.Fatalf("child's parent %+v, children %+v", k.Parent, k.Children)
	}
	if k.Result == nil || k.Result.Size != 5 || string(k.Result.Head) != "hello" {
		t.Fatalf("result: %+v", k.Result)
	}
	if r, err := db.ResultOf(ctx, kids[0]); err != nil || string(r) != "hello" {
		t.Fatalf("ResultOf: %q, %v", r, err)
	}

	// A parent that is gone is named so.
	exec(t, db, "DELETE FROM pepsi.message WHERE id = $1", parent)
	if k, err = db.Show(ctx, kids[2]); err != nil || k.Parent == nil || !k.Parent.Gone || k.Parent.ID != parent {
		t.Fatalf("orphan's parent: %+v, %v", k.Parent, err)
	}
}

// TestGraphLists: List, Browse and CountSelection take the children of a
// message; Joins counts the waiting parents and their open children.
func TestGraphLists(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	parent, kids := fanOut(t, db, 4, true)
	other, _ := fanOut(t, db, 2, false)
	seed(t, db, "work", queue.Pending, 3)
	exec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", kids[3])

	rows, err := db.List(ctx, admin.ListParams{Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, kids) {
		t.Fatalf("List --parent: %v, want %v", ids, kids)
	}
	rows, err = db.List(ctx, admin.ListParams{Parent: parent, Status: queue.Pending})
	if err != nil || len(rows) != 3 {
		t.Fatalf("List --parent --status pending: %d rows, %v", len(rows), err)
	}
	page, err := db.Browse(ctx, admin.BrowseParams{Parent: parent, Limit: 2})
	if err != nil || len(page.Rows) != 2 || page.Rows[0].ID != kids[3] || !page.Older {
		t.Fatalf("Browse parent: %+v, %v", page, err)
	}
	if n, _, err := db.CountSelection(ctx, admin.Selection{Parent: other}, 0); err != nil || n != 2 {
		t.Fatalf("CountSelection parent: %d, %v", n, err)
	}

	js, err := db.Joins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 1 || js[0] != (admin.JoinCount{Stage: "merge", Parents: 1, Children: 3}) {
		t.Fatalf("Joins: %+v", js)
	}
}

// TestStranded: a waiting parent with no open child is named once it and
// its children have been still for a while, not before.
func TestStranded(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	parent, kids := fanOut(t, db, 2, true)
	busy, _ := fanOut(t, db, 1, true)
	exec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = ANY($1)", kids)
	if ids, n, err := db.Stranded(ctx, 10); err != nil || n != 0 || len(ids) != 0 {
		t.Fatalf("Stranded at once: %v, %d, %v", ids, n, err)
	}
	exec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '2 minutes' WHERE id = ANY($1) OR parent = ANY($1)", []int64{parent, busy})
	ids, n, err := db.Stranded(ctx, 10)
	if err != nil || n != 1 || !slices.Equal(ids, []int64{parent}) {
		t.Fatalf("Stranded: %v, %d, %v; want [%d]", ids, n, err, parent)
	}
}

// TestPurgeTree: a purged parent takes its unfinished descendants along
// (a running one is cancelled instead), and a purged child lets its
// waiting parent's join go on.
func TestPurgeTree(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	parent, kids := fanOut(t, db, 3, false)
	// kids[0] spawns a grandchild, then runs on; kids[1] is done.
	exec(t, db, "UPDATE pepsi.state SET status = 'running' WHERE id = $1", kids[0])
	exec(t, db, "SELECT pepsi.spawn_many($1, 'deep', ARRAY['x']::bytea[])", kids[0])
	grand := childIDs(t, db, kids[0])
	exec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", kids[1])
	exec(t, db, "UPDATE pepsi.state SET status = 'failed', error = 'stage failed after spawning' WHERE id = $1", parent)

	res, err := db.Purge(ctx, admin.PurgeParams{Status: queue.Failed, Stage: "split"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 1 || res.Descendants != 2 || res.Cancelled != 1 {
		t.Fatalf("purge: %+v; want 1 changed, 2 descendants deleted (%d, %d), 1 cancelled", res, kids[2], grand[0])
	}
	for _, id := range []int64{parent, kids[2], grand[0]} {
		if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE id = $1", id); n != 0 {
			t.Fatalf("message %d survived the purge", id)
		}
	}
	if st := getState(t, db, kids[0]); st.Status != queue.Cancelled || deref(st.Error) != "cancelled: its parent was purged" {
		t.Fatalf("running child: %s %s", st.Status, deref(st.Error))
	}
	if st := getState(t, db, kids[1]); st.Status != queue.Done {
		t.Fatalf("done child: %s", st.Status)
	}

	// The last open child of a waiting parent purged: the parent goes on.
	p2, k2 := fanOut(t, db, 2, true)
	exec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", k2[0])
	exec(t, db, "UPDATE pepsi.state SET status = 'cancelled' WHERE id = $1", k2[1])
	sr, err := db.PurgeSelection(ctx, admin.Selection{IDs: k2[1:]}, false)
	if err != nil || sr.Changed != 1 {
		t.Fatalf("PurgeSelection: %+v, %v", sr, err)
	}
	if st := getState(t, db, p2); st.Status != queue.Pending || st.Stage != "merge" {
		t.Fatalf("parent after its last open child's purge: %s at %s, want pending at merge", st.Status, st.Stage)
	}

	// Purge --force of a waiting parent's pending child, by status.
	p3, k3 := fanOut(t, db, 1, true)
	if _, err := db.Purge(ctx, admin.PurgeParams{Status: queue.Pending, Stage: "work"}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE id = $1", k3[0]); n != 0 {
		t.Fatal("pending child survived")
	}
	if st := getState(t, db, p3); st.Status != queue.Pending {
		t.Fatalf("parent after its pending child's purge: %s", st.Status)
	}
}
