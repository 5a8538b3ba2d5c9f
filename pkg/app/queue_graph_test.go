package app

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// graphOf enqueues a message, runs it at split, spawns n children at work
// through the SQL API and moves it to wait at merge; it returns it and
// its children.
func graphOf(t *testing.T, db *pgtest.DB, n int) (int64, []int64) {
	t.Helper()
	ctx := context.Background()
	parent, err := queue.Enqueue(ctx, db.Pool, "split", []byte("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Admit(ctx); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'running' WHERE id = $1", parent)
	payloads := make([][]byte, n)
	sqlExec(t, db, "SELECT pepsi.spawn_many($1, 'work', $2::bytea[])", parent, payloads)
	sqlExec(t, db, "SELECT pepsi.join($1, 'merge')", parent)
	rows, err := db.Pool.Query(ctx, "SELECT id FROM pepsi.children($1)", parent)
	if err != nil {
		t.Fatal(err)
	}
	kids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return parent, kids
}

// TestQueueGraph: the waiting status in the summary and ls --status, show
// of a parent and of a child, ls --parent, cancel --status waiting, and a
// purge that takes a parent's unfinished descendants along.
func TestQueueGraph(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	parent, kids := graphOf(t, db, 7)
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'done', result = 'sum=42' WHERE id = $1", kids[0])
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'failed', error = 'bad row' WHERE id = $1", kids[1])

	r := pepsi(t, "", "queue", "summary")
	r.wantCode(t, 0)
	head, _, _ := strings.Cut(r.stdout, "\n")
	if !strings.Contains(head, " waiting ") {
		t.Fatalf("summary header lacks waiting: %q", head)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[0] == "merge" && f[5] != "1" {
			t.Errorf("summary: merge's waiting column is %s, want 1:\n%s", f[5], r.stdout)
		}
	}

	if got := lsIDs(t, "--status", "waiting"); !slices.Equal(got, []int64{parent}) {
		t.Errorf("ls --status waiting = %v, want [%d]", got, parent)
	}
	if got := lsIDs(t, "--parent", strconv.FormatInt(parent, 10)); !slices.Equal(got, kids) {
		t.Errorf("ls --parent = %v, want %v", got, kids)
	}
	if got := lsIDs(t, "--parent", strconv.FormatInt(parent, 10), "--status", "failed"); !slices.Equal(got, kids[1:2]) {
		t.Errorf("ls --parent --status failed = %v, want %v", got, kids[1:2])
	}
	r = pepsi(t, "", "queue", "ls", "--parent", "x")
	r.wantCode(t, 2)
	r.wantOneError(t, `--parent "x": want a message id`)

	r = pepsi(t, "", "queue", "show", strconv.FormatInt(parent, 10))
	r.wantCode(t, 0)
	id := func(i int) string { return strconv.FormatInt(kids[i], 10) }
	for _, want := range []string{
		"status          waiting\n",
		"children        7: 5 pending, 1 done, 1 failed\n",
		"open children   " + strings.Join([]string{id(2), id(3), id(4), id(5), id(6)}, " ") + "\n",
		"failed children " + id(1) + "\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show parent lacks %q:\n%s", want, r.stdout)
		}
	}
	r = pepsi(t, "", "queue", "show", id(0))
	r.wantCode(t, 0)
	for _, want := range []string{
		"parent          " + strconv.FormatInt(parent, 10) + " at merge, waiting\n",
		"result          6 bytes: \"sum=42\"\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show child lacks %q:\n%s", want, r.stdout)
		}
	}
	if r = pepsi(t, "", "queue", "show", "--result", id(0)); r.code != 0 || r.stdout != "sum=42" {
		t.Errorf("show --result: %d %q %q", r.code, r.stdout, r.stderr)
	}

	// hold takes no waiting message; cancel does, with its open children.
	r = pepsi(t, "", "queue", "hold", "--status", "waiting")
	r.wantCode(t, 2)
	other, otherKids := graphOf(t, db, 2)
	r = pepsi(t, "", "queue", "cancel", "--status", "waiting", "--stage", "merge")
	r.wantCode(t, 0)
	for _, k := range append([]int64{parent, other}, otherKids...) {
		if _, st := stateOf(t, db, k); st != queue.Cancelled {
			t.Errorf("after cancel --status waiting: %d is %s", k, st)
		}
	}

	// A purge of a failed parent takes its pending children along.
	p3, k3 := graphOf(t, db, 3)
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'failed' WHERE id = $1", p3)
	r = pepsi(t, "", "queue", "purge", "--status", "failed", "--stage", "merge")
	r.wantCode(t, 0)
	if r.stdout != "purged 1 message, and 3 unfinished descendants of theirs\n" {
		t.Errorf("purge: %q", r.stdout)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.message WHERE id = ANY($1)", append(k3, p3)); n != 0 {
		t.Errorf("%d messages of the purged tree left", n)
	}
}
