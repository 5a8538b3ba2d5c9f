package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// indexSize is the IndexSizes entry of index (schema-qualified), failing
// the test when there is none.
func indexSize(t *testing.T, db *pgtest.DB, index string) queue.IndexSize {
	t.Helper()
	sizes, err := db.IndexSizes(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sizes {
		if s.Name == index {
			return s
		}
	}
	t.Fatalf("IndexSizes has no %s: %+v", index, sizes)
	return queue.IndexSize{}
}

// invalidIndexes counts the invalid indexes of pepsi's tables.
func invalidIndexes(t *testing.T, db *pgtest.DB) int64 {
	t.Helper()
	return count(t, db, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pepsi' AND NOT i.indisvalid`)
}

// TestReindexBloated: 200 000 messages of which all but 5 000 are deleted
// and vacuumed leave message_pkey at the size of 200 000 entries; its
// estimate says so, and Reindex rebuilds it (a new file, a fraction of the
// size, no invalid copy left) to about what the estimate said it needs.
func TestReindexBloated(t *testing.T) {
	db, _, ctx := newDB(t)
	exec(t, db, "INSERT INTO pepsi.message (payload) SELECT ''::bytea FROM generate_series(1, 200000)")
	exec(t, db, "DELETE FROM pepsi.message WHERE id > 5000")
	if err := db.Vacuum(ctx, "pepsi.message"); err != nil {
		t.Fatal(err)
	}
	before := indexSize(t, db, "pepsi.message_pkey")
	if before.Entries != 5000 || before.Size < 2<<20 || before.Size <= 4*before.Need || before.Busy {
		t.Fatalf("bloated message_pkey: %+v, want 5 000 entries in 2 MB or more, over 4x its need, no build running", before)
	}
	file := count(t, db, "SELECT relfilenode::bigint FROM pg_class WHERE oid = 'pepsi.message_pkey'::regclass")
	size, err := db.Reindex(ctx, before.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := count(t, db, "SELECT pg_relation_size('pepsi.message_pkey')"); got != size || size*4 > before.Size {
		t.Errorf("rebuilt: %d bytes (Reindex said %d), want under a quarter of %d", got, size, before.Size)
	}
	if n := count(t, db, "SELECT relfilenode::bigint FROM pg_class WHERE oid = 'pepsi.message_pkey'::regclass"); n == file {
		t.Errorf("message_pkey still in file %d", n)
	}
	if n := invalidIndexes(t, db); n != 0 {
		t.Errorf("%d invalid indexes left", n)
	}
	// A fresh build is what the estimate says the entries need.
	after := indexSize(t, db, "pepsi.message_pkey")
	if after.Size != size || float64(after.Size) > 1.25*float64(after.Need) || float64(after.Size) < 0.75*float64(after.Need) {
		t.Errorf("rebuilt: %+v, want a size within 25%% of the need", after)
	}
	// The primary key still holds.
	if _, err := db.Pool.Exec(ctx, "INSERT INTO pepsi.message (id, payload) VALUES (1, '')"); err == nil {
		t.Error("a second message 1 was inserted")
	}
}

// TestIndexSizesNotBloated: indexes that grew (queue rows inserted in
// ingress order, as pepsi.enqueue does) and lost few entries are as large as the estimate says
// their entries need, text key columns (the stage) included: nothing to
// rebuild. And Reindex rebuilds only pepsi's own indexes.
func TestIndexSizesNotBloated(t *testing.T) {
	db, _, ctx := newDB(t)
	seed(t, db, "a-stage-with-a-long-name", queue.Pending, 30000)
	seed(t, db, "b", queue.Pending, 30000)
	// One message in 100 goes, as churn: the VACUUM counts the entries.
	exec(t, db, "DELETE FROM pepsi.state WHERE id % 100 = 0")
	exec(t, db, "DELETE FROM pepsi.message WHERE id % 100 = 0")
	for _, table := range queue.Vacuumed {
		if err := db.Vacuum(ctx, table); err != nil {
			t.Fatal(err)
		}
	}
	sizes, err := db.IndexSizes(ctx, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sizes {
		names = append(names, s.Name)
		t.Logf("%s: %d bytes, need %d (%.2f)", s.Name, s.Size, s.Need, float64(s.Size)/float64(s.Need))
		if s.Entries != 59400 || float64(s.Size) > 1.25*float64(s.Need) || float64(s.Size) < 0.75*float64(s.Need) {
			t.Errorf("%+v: want 59 400 entries, the size within 25%% of the need", s)
		}
	}
	want := []string{"pepsi.message_pkey", "pepsi.state_live_pkey", "pepsi.state_pending"}
	if len(names) != len(want) || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Errorf("indexes of 256 kB or more: %v, want %v", names, want)
	}
	exec(t, db, "CREATE TABLE public.other (id int PRIMARY KEY)")
	for _, name := range []string{"public.other_pkey", "pepsi.message", "pepsi.state_live_pkey; SELECT 1"} {
		if _, err := db.Reindex(ctx, name); err == nil {
			t.Errorf("Reindex(%s) did it", name)
		}
	}
}

// TestReindexLeftover: a REINDEX CONCURRENTLY cancelled while it waits (a
// dispatcher stopped, say) leaves an invalid message_pkey_ccnew behind.
// While the REINDEX runs it is left alone; once it has ended,
// DropReindexLeftovers drops it, and the next Reindex works.
func TestReindexLeftover(t *testing.T) {
	db, _, ctx := newDB(t)
	exec(t, db, "INSERT INTO pepsi.message (payload) SELECT ''::bytea FROM generate_series(1, 1000)")
	// A writer's open transaction: the REINDEX waits for it before it builds.
	writer, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(context.Background()) //nolint:errcheck // rolled back below
	if _, err := writer.Exec(ctx, "INSERT INTO pepsi.message (payload) VALUES ('')"); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := db.Reindex(rctx, "pepsi.message_pkey")
		done <- err
	}()
	waitUntil(t, "the REINDEX waits with its copy made", func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_progress_create_index
			WHERE relid = 'pepsi.message'::regclass AND phase LIKE 'waiting for writers%'`) == 1 &&
			count(t, db, "SELECT count(*) FROM pg_class WHERE relname = 'message_pkey_ccnew'") == 1
	})
	if dropped, err := db.DropReindexLeftovers(ctx); err != nil || len(dropped) != 0 {
		t.Fatalf("while the REINDEX runs: dropped %v (%v), want nothing", dropped, err)
	}
	if s := indexSize(t, db, "pepsi.message_pkey"); !s.Busy {
		t.Errorf("%+v: want Busy while the REINDEX runs", s)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled REINDEX returned no error")
	}
	if err := writer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE c.relname = 'message_pkey_ccnew' AND NOT i.indisvalid`); n != 1 {
		t.Fatalf("%d invalid message_pkey_ccnew, want the one the cancelled REINDEX left", n)
	}
	if sizes, err := db.IndexSizes(ctx, 0); err != nil || len(sizes) == 0 || sizes[0].Name != "pepsi.message_pkey" {
		t.Errorf("IndexSizes: %+v (%v), want message_pkey first and no copy", sizes, err)
	}
	waitUntil(t, "the cancelled REINDEX gone", func() bool {
		return count(t, db, "SELECT count(*) FROM pg_stat_progress_create_index WHERE relid = 'pepsi.message'::regclass") == 0
	})
	dropped, err := db.DropReindexLeftovers(ctx)
	if err != nil || len(dropped) != 1 || dropped[0] != "pepsi.message_pkey_ccnew" {
		t.Fatalf("dropped %v (%v), want pepsi.message_pkey_ccnew", dropped, err)
	}
	if n := invalidIndexes(t, db); n != 0 {
		t.Errorf("%d invalid indexes left", n)
	}
	if dropped, err := db.DropReindexLeftovers(ctx); err != nil || len(dropped) != 0 {
		t.Errorf("again: dropped %v (%v), want nothing", dropped, err)
	}
	if _, err := db.Reindex(ctx, "pepsi.message_pkey"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pg_indexes WHERE schemaname = 'pepsi' AND tablename = 'message'"); n != 1 {
		t.Errorf("pepsi.message has %d indexes, want its primary key alone", n)
	}
}

// waitUntil polls cond every 20 ms until it holds, failing the test after
// 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
