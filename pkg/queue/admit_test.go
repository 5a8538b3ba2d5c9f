package queue_test

import (
	"context"
	"slices"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestAdmit: pepsi.enqueue() writes one row to pepsi.ingress and nothing
// to the queue; Admit moves every one, in batches, to pending at its
// stage with its payload, headers, priority, flow key and enqueue time,
// and leaves rows another session is admitting to it without waiting.
func TestAdmit(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	if _, _, err := db.SetFlowKeys(ctx, []string{"k"}, []queue.FlowKey{{Stage: "k", Header: "customer", Limit: 1}}); err != nil {
		t.Fatal(err)
	}
	n := queue.AdmitBatch + 500
	exec(t, db, `SELECT pepsi.enqueue(CASE WHEN i % 2 = 0 THEN 'a' ELSE 'k' END, convert_to(i::text, 'UTF8'),
	                  jsonb_build_object('customer', 'c' || i % 3), i % 5 - 2)
	               FROM generate_series(1, $1) i`, n)
	if c := count(t, db, "SELECT count(*) FROM pepsi.state") + count(t, db, "SELECT count(*) FROM pepsi.message"); c != 0 {
		t.Fatalf("%d queue and message rows before admission, want 0", c)
	}
	if c := count(t, db, "SELECT count(*) FROM pepsi.ingress"); c != int64(n) {
		t.Fatalf("%d rows in pepsi.ingress, want %d", c, n)
	}
	// Rows locked by another admission are left to it, without waiting.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // rolled back below
	if _, err := tx.Exec(ctx, "SELECT FROM pepsi.ingress FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Admit(ctx); err != nil || got != 0 {
		t.Fatalf("Admit while another session holds every row = %d, %v; want 0", got, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if got, err := db.Admit(ctx); err != nil || got != int64(n) {
		t.Fatalf("Admit = %d, %v; want %d", got, err, n)
	}
	if c := count(t, db, "SELECT count(*) FROM pepsi.ingress"); c != 0 {
		t.Fatalf("%d rows left in pepsi.ingress", c)
	}
	// Every message once, pending, as enqueued.
	bad := count(t, db, `
SELECT count(*) FROM generate_series(1, $1) i
  LEFT JOIN pepsi.message m ON convert_from(m.payload, 'UTF8') = i::text
  LEFT JOIN pepsi.state s ON s.id = m.id
 WHERE s.id IS NULL OR s.status <> 'pending' OR s.attempts <> 0
    OR s.stage <> CASE WHEN i % 2 = 0 THEN 'a' ELSE 'k' END
    OR s.priority <> i % 5 - 2 OR s.updated_at <> m.created_at
    OR m.headers <> jsonb_build_object('customer', 'c' || i % 3)
    OR s.flow_key IS DISTINCT FROM CASE WHEN i % 2 = 1 THEN 'c' || i % 3 END`, n)
	if bad != 0 {
		t.Fatalf("%d of %d messages not admitted as enqueued", bad, n)
	}
	if c := count(t, db, "SELECT count(*) FROM pepsi.state"); c != int64(n) {
		t.Fatalf("%d queue rows, want %d", c, n)
	}
	if got, err := db.Admit(ctx); err != nil || got != 0 {
		t.Fatalf("Admit with nothing waiting = %d, %v", got, err)
	}
}

// TestTurnAdmits: a Turn with Admit claims, in its one round trip, what
// pepsi.enqueue() committed before it, in ingress order; an admission of
// nothing notifies nobody, even while a dispatcher is armed.
func TestTurnAdmits(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	var ids []int64
	for range 3 {
		id, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var res queue.TurnResult
	if err := db.RunTurn(ctx, queue.Turn{Caps: []queue.StageCap{{Stage: "a", Cap: 10}}}, &res); err != nil || len(res.Claimed) != 0 {
		t.Fatalf("turn without Admit claimed %v, %v; want nothing", res.Claimed, err)
	}
	err := db.RunTurn(ctx, queue.Turn{Admit: true, Caps: []queue.StageCap{{Stage: "a", Cap: 10}}}, &res)
	if err != nil || res.Admitted != 3 {
		t.Fatalf("turn with Admit: admitted %d, %v; want 3", res.Admitted, err)
	}
	var got []int64
	for _, c := range res.Claimed {
		got = append(got, c.ID)
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Fatalf("claimed %v, want %v", got, ids)
	}
	if c := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'running'"); c != 3 {
		t.Fatalf("%d running, want 3", c)
	}

	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "LISTEN pepsi_ingress"); err != nil {
		t.Fatal(err)
	}
	if err := db.SetArmed(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	if err := db.RunTurn(ctx, queue.Turn{Admit: true}, &res); err != nil || res.Admitted != 0 {
		t.Fatalf("empty admission: %d, %v", res.Admitted, err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 0)
	if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 1)
}
