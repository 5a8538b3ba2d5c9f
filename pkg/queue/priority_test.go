package queue_test

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestClaimPriority: within a stage the claim takes lower priorities first
// and ingress order within one, from every ingress path; the claimed rows
// carry their priority.
func TestClaimPriority(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	var ids []int64
	for _, p := range []int32{5, 0, 5, -1, 0} {
		id, created, err := db.EnqueueKeyed(ctx, queue.Keyed{Stage: "a", Priority: p})
		if err != nil || !created {
			t.Fatalf("EnqueueKeyed(priority %d) = %d, %v, %v", p, id, created, err)
		}
		ids = append(ids, id)
	}
	var sqlID int64
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue('a', 'x', p_priority => -1)").Scan(&sqlID); err != nil {
		t.Fatal(err)
	}
	bulk, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Priority: 3, Payloads: [][]byte{[]byte("b1"), []byte("b2")}})
	if err != nil {
		t.Fatal(err)
	}
	old, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil) // the 3-argument form, priority 0
	if err != nil {
		t.Fatal(err)
	}
	admit(t, db)
	want := []int64{ids[3], sqlID, ids[1], ids[4], old, bulk[0], bulk[1], ids[0], ids[2]}
	wantPrio := []int32{-1, -1, 0, 0, 0, 3, 3, 5, 5}
	var got []int64
	for len(got) < len(want) {
		// Caps of 2: each claim must take the lowest of what is left.
		c, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 2}}, nil)
		if err != nil || len(c) == 0 {
			t.Fatalf("Claim after %v: %v, %v", got, c, err)
		}
		slices.SortFunc(c, func(x, y queue.Claimed) int {
			if x.Priority != y.Priority {
				return int(x.Priority - y.Priority)
			}
			return int(x.ID - y.ID)
		})
		for _, x := range c {
			if i := len(got); x.Priority != wantPrio[i] {
				t.Errorf("claimed %d with priority %d, want %d", x.ID, x.Priority, wantPrio[i])
			}
			got = append(got, x.ID)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("claim order %v, want %v", got, want)
	}
}

// TestEnqueueKeyRace: eight producers racing on one key, each in its own
// transaction, end with exactly one message; the others get its id. Once
// it is finished the key makes a new message.
func TestEnqueueKeyRace(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	const producers = 8
	for round := 0; round < 5; round++ {
		key := "order-" + strconv.Itoa(round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		ids := make([]int64, producers)
		created := make([]bool, producers)
		errs := make([]error, producers)
		for i := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
				ids[i], created[i], errs[i] = queue.EnqueueKeyed(ctx, tx, queue.Keyed{Stage: "a", Key: key, Payload: []byte{byte(i)}})
				if errs[i] == nil {
					errs[i] = tx.Commit(ctx)
				}
			}()
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		news := 0
		for i := range producers {
			if created[i] {
				news++
			}
			if ids[i] != ids[0] {
				t.Errorf("round %d: producer %d got message %d, producer 0 got %d", round, i, ids[i], ids[0])
			}
		}
		if news != 1 {
			t.Errorf("round %d: %d producers say they created the message, want 1", round, news)
		}
		if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE dedup_key = $1", key); n != 1 {
			t.Errorf("round %d: %d state rows with key %s, want 1", round, n, key)
		}
		if n := count(t, db, "SELECT count(*) FROM pepsi.message m JOIN pepsi.state s USING (id) WHERE s.dedup_key = $1", key); n != 1 {
			t.Errorf("round %d: %d messages with key %s, want 1", round, n, key)
		}
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message"); n != 5 {
		t.Errorf("%d messages, want 5 (no message row without its state row)", n)
	}

	// Running and paused still hold the key; done and failed free it.
	first, _, err := db.EnqueueKeyed(ctx, queue.Keyed{Stage: "a", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"running", "paused", "done"} {
		exec(t, db, "UPDATE pepsi.state SET status = $2 WHERE id = $1", first, st)
		id, created, err := db.EnqueueKeyed(ctx, queue.Keyed{Stage: "a", Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if wantNew := st == "done"; created != wantNew || (created == (id == first)) {
			t.Errorf("key held by a %s message: EnqueueKeyed = %d (first %d), created %v", st, id, first, created)
		}
	}
	var sqlID int64
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue('a', p_key => 'k')").Scan(&sqlID); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE dedup_key = 'k'"); n != 2 {
		t.Errorf("%d messages with key k, want 2 (one done, one pending)", n)
	}
	if _, _, err := db.EnqueueKeyed(ctx, queue.Keyed{Stage: "", Key: "k"}); err == nil {
		t.Error("EnqueueKeyed without a stage succeeded")
	}
}

// TestMigratePriorityKey: 007 upgrades a populated version-6 database in
// place: every message kept, at priority 0 and without a key, still
// claimed in id order. PEPSI_TEST_MIGRATE_ROWS sets how many messages
// (default 10 000; the note's figure is for 1 000 000).
func TestMigratePriorityKey(t *testing.T) {
	ctx, _, conn, known := migratedTo(t, 6)
	rows := migrateRows(t)
	took := migratePopulated(t, ctx, conn, 6, known, rows)
	t.Logf("007 and later on a database of %d messages: %v", rows, took.Round(time.Millisecond))
	var n, pending int64
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'pending')
		FROM pepsi.state WHERE priority = 0 AND dedup_key IS NULL`).Scan(&n, &pending); err != nil || n != int64(rows) || pending != int64(rows+1)/2 {
		t.Fatalf("after 007: %d rows at priority 0 without a key, %d pending (%v), want %d", n, pending, err, rows)
	}
	c, err := queue.Claim(ctx, conn, []queue.StageCap{{Stage: "a", Cap: 2}}, nil)
	if err != nil || len(c) != 2 || c[0].ID+c[1].ID != 1+3 {
		t.Fatalf("claim after 007: %+v, %v; want ids 1 and 3", c, err)
	}
	var id int64
	if err := conn.QueryRow(ctx, "SELECT pepsi.enqueue('a', 'y', '{}')").Scan(&id); err != nil || id != int64(rows)+1 {
		t.Fatalf("pepsi.enqueue after 007 = %d, %v", id, err)
	}
}
