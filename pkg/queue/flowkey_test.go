package queue_test

import (
	"slices"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// keyedClaim claims at the keyed stage with cap n, KEY_LIMIT lim and held,
// and returns the ids claimed, in id order, and their keys.
func keyedClaim(t *testing.T, db *pgtest.DB, stage string, n, lim int, held ...queue.HeldKey) ([]int64, map[int64]string) {
	t.Helper()
	c, err := queue.Claim(testCtx(t), db.Pool, []queue.StageCap{{Stage: stage, Cap: n, KeyLimit: lim, Held: held}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	keys := map[int64]string{}
	for _, x := range c {
		ids = append(ids, x.ID)
		if x.Keyed {
			keys[x.ID] = x.Key
		}
	}
	slices.Sort(ids)
	return ids, keys
}

// TestClaimKeyed: at a stage with KEY the claim takes a key's earliest
// unfinished message only, none of a key the dispatcher holds at its
// limit, every message without the header, and with KEY_LIMIT = 2 two of
// a key; a paused message holds its key's place. Every way a message
// becomes pending at the stage gives it its key (a redrive too: pkg/admin's
// TestRedriveFlowKey).
func TestClaimKeyed(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	changed, _, err := db.SetFlowKeys(ctx, []string{"k", "plain"}, []queue.FlowKey{{Stage: "k", Header: "customer", Limit: 1}})
	if err != nil || !slices.Equal(changed, []string{"k"}) {
		t.Fatalf("SetFlowKeys = %v, %v", changed, err)
	}
	if changed, _, err := db.SetFlowKeys(ctx, []string{"k", "plain"}, []queue.FlowKey{{Stage: "k", Header: "customer", Limit: 1}}); err != nil || changed != nil {
		t.Fatalf("SetFlowKeys again = %v, %v; want nothing changed", changed, err)
	}
	enq := func(stage, customer string, prio int32) int64 {
		t.Helper()
		h := map[string]string{}
		if customer != "" {
			h["customer"] = customer
		}
		id, _, err := db.EnqueueKeyed(ctx, queue.Keyed{Stage: stage, Headers: h, Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a1 := enq("k", "a", 0)
	b1 := enq("k", "b", 0)
	a2 := enq("k", "a", -5) // a better priority does not jump its key's queue
	n1 := enq("k", "", 0)   // no header: no key
	bulk, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "k", Headers: map[string]string{"customer": "c"}, Payloads: make([][]byte, 2)})
	if err != nil {
		t.Fatal(err)
	}
	var sqlID int64
	if err := db.Pool.QueryRow(ctx, `SELECT pepsi.enqueue('k', 'x', '{"customer": "d"}')`).Scan(&sqlID); err != nil {
		t.Fatal(err)
	}
	plain := enq("plain", "a", 0) // the same header at a stage without KEY: no key
	admit(t, db)
	var keyless int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1) AND flow_key IS NULL", []int64{n1, plain}).Scan(&keyless); err != nil || keyless != 2 {
		t.Fatalf("%d of the messages without a key have none (%v)", keyless, err)
	}

	// Key d is held at its limit: not taken. The rest: one of each key.
	got, keys := keyedClaim(t, db, "k", 10, 1, queue.HeldKey{Key: "d", N: 1})
	if want := []int64{a1, b1, n1, bulk[0]}; !slices.Equal(got, want) {
		t.Fatalf("first claim %v, want %v", got, want)
	}
	if keys[a1] != "a" || keys[bulk[0]] != "c" || len(keys) != 3 {
		t.Errorf("claimed keys %v", keys)
	}
	// Held by the dispatcher now: a, b, c (and d): nothing more but d.
	got, _ = keyedClaim(t, db, "k", 10, 1, queue.HeldKey{Key: "a", N: 1}, queue.HeldKey{Key: "b", N: 1}, queue.HeldKey{Key: "c", N: 1})
	if want := []int64{sqlID}; !slices.Equal(got, want) {
		t.Fatalf("second claim %v, want %v", got, want)
	}
	// a1 fails and is paused for a retry: a2 still waits behind it.
	settled, err := settle(ctx, db, []queue.Settle{
		{ID: a1, Stage: "k", Verdict: queue.PassFailed, Retry: queue.RetryPolicy{Retries: 1, Delay: 3600e9, Max: 3600e9}},
		{ID: bulk[0], Stage: "k", Verdict: queue.Finish},
	})
	if err != nil || len(settled) != 2 || settled[0].After != queue.Paused {
		t.Fatalf("Settle = %+v, %v", settled, err)
	}
	got, _ = keyedClaim(t, db, "k", 10, 1, queue.HeldKey{Key: "b", N: 1}, queue.HeldKey{Key: "d", N: 1})
	if want := []int64{bulk[1]}; !slices.Equal(got, want) {
		t.Fatalf("claim with a1 paused: %v, want %v (a2 waits behind a1)", got, want)
	}
	// With KEY_LIMIT = 2, key a has room for one more beside its paused a1.
	got, _ = keyedClaim(t, db, "k", 10, 2, queue.HeldKey{Key: "b", N: 1}, queue.HeldKey{Key: "d", N: 1}, queue.HeldKey{Key: "c", N: 1})
	if want := []int64{a2}; !slices.Equal(got, want) {
		t.Fatalf("KEY_LIMIT 2 claim %v, want %v", got, want)
	}

	// Moving on into a keyed stage gives the message its key there.
	if _, _, err := db.SetFlowKeys(ctx, []string{"k", "plain"}, []queue.FlowKey{{Stage: "k", Header: "customer", Limit: 1}, {Stage: "plain", Header: "customer", Limit: 3}}); err != nil {
		t.Fatal(err)
	}
	var key *string
	if err := db.Pool.QueryRow(ctx, "SELECT flow_key FROM pepsi.state WHERE id = $1", plain).Scan(&key); err != nil || key == nil || *key != "a" {
		t.Fatalf("after KEY was set at plain, its pending message has key %v (%v), want a", key, err)
	}
	if _, err := settle(ctx, db, []queue.Settle{{ID: b1, Stage: "k", Verdict: queue.Advance, Next: "plain"}}); err != nil {
		t.Fatal(err)
	}
	got, keys = keyedClaim(t, db, "plain", 10, 3)
	if want := []int64{b1, plain}; !slices.Equal(got, want) || keys[b1] != "b" || keys[plain] != "a" {
		t.Fatalf("claim at plain: %v %v, want %v with keys", got, keys, want)
	}
	// KEY gone: the stage's unfinished messages lose their keys.
	if _, _, err := db.SetFlowKeys(ctx, []string{"k", "plain"}, nil); err != nil {
		t.Fatal(err)
	}
	var still int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE flow_key IS NOT NULL AND status IN ('pending', 'running', 'paused')").Scan(&still); err != nil || still != 0 {
		t.Fatalf("%d unfinished messages keep a key after KEY went (%v)", still, err)
	}
	if fks, err := db.FlowKeys(ctx); err != nil || len(fks) != 0 {
		t.Fatalf("FlowKeys = %v, %v", fks, err)
	}
}

// TestMigrateFlowKey: 008 upgrades a populated version 7 in place: no row
// has a key until a dispatcher sets its stages' KEY, which keys them.
// PEPSI_TEST_MIGRATE_ROWS=1000000 times it on a million messages.
func TestMigrateFlowKey(t *testing.T) {
	ctx, _, conn, known := migratedTo(t, 7)
	rows := migrateRows(t)
	took := migratePopulated(t, ctx, conn, 7, known, rows)
	t.Logf("008 on a database of %d messages: %v", rows, took.Round(time.Millisecond))
	var keyed int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE flow_key IS NOT NULL").Scan(&keyed); err != nil || keyed != 0 {
		t.Fatalf("after 008: %d rows with a key (%v), want 0", keyed, err)
	}
	c, err := queue.Claim(ctx, conn, []queue.StageCap{{Stage: "a", Cap: 2}}, nil)
	if err != nil || len(c) != 2 || c[0].ID+c[1].ID != 1+3 || c[0].Keyed {
		t.Fatalf("claim after 008: %+v, %v; want ids 1 and 3 without keys", c, err)
	}
}

// TestClaimKeyedHeads: where the first rows of a keyed stage are all of
// held keys (more of them than the claim's window), the claim still finds
// the other keys' heads behind them, in (priority, id) order: at
// KEY_LIMIT 1 each free key's earliest message unless a paused one holds
// its place, at KEY_LIMIT 2 the first two unfinished messages of a key
// less those in flight.
func TestClaimKeyedHeads(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	if _, _, err := db.SetFlowKeys(ctx, []string{"k"}, []queue.FlowKey{{Stage: "k", Header: "customer", Limit: 1}}); err != nil {
		t.Fatal(err)
	}
	enq := func(customer string, prio int32) int64 {
		t.Helper()
		id, _, err := db.EnqueueKeyed(ctx, queue.Keyed{Stage: "k", Headers: map[string]string{"customer": customer}, Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for range 200 {
		enq("hot", 0) // the held key's backlog: far more than a window
	}
	b1, b2, _ := enq("b", 0), enq("b", 0), enq("b", 0)
	c1, c2 := enq("c", 0), enq("c", 0)
	d1 := enq("d", 5) // a later priority: after every priority-0 head
	e1 := enq("e", -1)
	exec(t, db, "UPDATE pepsi.state SET status = 'paused', timeout = now() + interval '1 hour' WHERE id = $1", c1)

	hot := queue.HeldKey{Key: "hot", N: 1}
	ids, _ := keyedClaim(t, db, "k", 4, 1, hot)
	if want := []int64{b1, d1, e1}; !slices.Equal(ids, want) {
		t.Errorf("KEY_LIMIT 1, hot held: claimed %v, want %v (b's head, d, e; c held by its paused head)", ids, want)
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'pending', attempts = 0 WHERE id = ANY($1)", ids)

	// The cap takes the best by priority: e (-1), then b's head (0).
	if ids, _ := keyedClaim(t, db, "k", 2, 1, hot); !slices.Equal(ids, []int64{b1, e1}) {
		t.Errorf("KEY_LIMIT 1, cap 2: claimed %v, want %v", ids, []int64{b1, e1})
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'pending', attempts = 0 WHERE status = 'running'")

	// KEY_LIMIT 2 with hot at its limit and one of b in flight (b1,
	// running): b2 only; c2 behind its paused head; d1, e1.
	exec(t, db, "UPDATE pepsi.state SET status = 'running' WHERE id = $1", b1)
	ids, _ = keyedClaim(t, db, "k", 8, 2, queue.HeldKey{Key: "hot", N: 2}, queue.HeldKey{Key: "b", N: 1})
	if want := []int64{b2, c2, d1, e1}; !slices.Equal(ids, want) {
		t.Errorf("KEY_LIMIT 2: claimed %v, want %v", ids, want)
	}
}
