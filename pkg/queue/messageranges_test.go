package queue_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// messageRanges returns the names of pepsi.message's ranges, in id order.
func messageRanges(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(testCtx(t), `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'pepsi.message'::regclass AND c.relname <> 'message_default'
		ORDER BY split_part(c.relname, '_', 2)::bigint`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// messagePartition returns the partition of pepsi.message that holds id.
func messagePartition(t *testing.T, db *pgtest.DB, id int64) string {
	t.Helper()
	var name string
	if err := db.Pool.QueryRow(testCtx(t), "SELECT tableoid::regclass::text FROM pepsi.message WHERE id = $1", id).Scan(&name); err != nil {
		t.Fatalf("message %d: %v", id, err)
	}
	return name
}

// TestMessageRanges: a new database has ranges of message ids ahead of the
// sequence, and messages go to theirs; the sweep creates more as the
// sequence nears their end, of the width asked (or the last one's); a
// range whose ids have all been drawn is dropped once at most a few of
// its messages are still queued, and those few move to the default
// partition, where they can still be read and worked; a range with
// messages waiting in pepsi.ingress, or with more left than allowed, is
// kept. Ids drawn past the ranges go to the default partition, and the
// next ranges start past them.
func TestMessageRanges(t *testing.T) {
	db, _, ctx := newDB(t)
	if got := messageRanges(t, db); !slices.Equal(got, []string{"message_1_10001", "message_10001_20001", "message_20001_30001"}) {
		t.Fatalf("ranges of a new database: %v", got)
	}
	ids := seed(t, db, "a", queue.Pending, 5)
	if p := messagePartition(t, db, ids[0]); p != "pepsi.message_1_10001" {
		t.Fatalf("message %d in %s", ids[0], p)
	}

	// The sweep keeps three widths past the sequence: one more now.
	if n, seq, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 1 || seq != ids[4] {
		t.Fatalf("MessageAhead = %d, %d, %v; want 1 created at sequence %d", n, seq, err, ids[4])
	}
	if n, _, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 0 {
		t.Fatalf("MessageAhead again = %d, %v; want none", n, err)
	}
	exec(t, db, "SELECT setval('pepsi.message_id_seq', 35000)")
	if n, _, err := db.MessageAhead(ctx, 2000, 3); err != nil || n != 1 {
		t.Fatalf("MessageAhead(2000) = %d, %v; want 1 range", n, err)
	}
	if n, _, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 0 {
		t.Fatalf("MessageAhead(last width) = %d, %v; want none", n, err)
	}
	if got := messageRanges(t, db); got[len(got)-1] != "message_40001_42001" {
		t.Fatalf("ranges: %v; want the last 40001 to 42001", got)
	}

	// Three ranges' ids are all drawn. The two empty ones go; the first,
	// with its five messages queued, stays; with two, it goes, and they
	// move.
	if n, _, err := db.RetireMessages(ctx, 2, 4); err != nil || n != 2 {
		t.Fatalf("RetireMessages = %d, %v; want the 2 empty ranges", n, err)
	}
	if got := messageRanges(t, db); got[0] != "message_1_10001" || got[1] != "message_30001_40001" {
		t.Fatalf("ranges: %v; want the first kept, the next two gone", got)
	}
	exec(t, db, "INSERT INTO pepsi.ingress (id, stage) VALUES (9000, 'a')")
	exec(t, db, "DELETE FROM pepsi.message WHERE id = ANY($1)", ids[:3])
	if n, _, err := db.RetireMessages(ctx, 2, 4); err != nil || n != 0 {
		t.Fatalf("RetireMessages with one waiting in ingress = %d, %v; want 0", n, err)
	}
	if n, err := db.Admit(ctx); err != nil || n != 1 {
		t.Fatalf("Admit = %d, %v", n, err)
	}
	exec(t, db, "DELETE FROM pepsi.message WHERE id = 9000")
	dropped, moved, err := db.RetireMessages(ctx, 2, 4)
	if err != nil || dropped != 1 || moved != 2 {
		t.Fatalf("RetireMessages = %d dropped, %d moved, %v; want 1 and 2", dropped, moved, err)
	}
	if got := messageRanges(t, db); got[0] != "message_30001_40001" {
		t.Fatalf("ranges after retiring: %v", got)
	}
	for _, id := range ids[3:] {
		if p := messagePartition(t, db, id); p != "pepsi.message_default" {
			t.Errorf("message %d in %s, want the default partition", id, p)
		}
	}
	// pepsi.message_row reads them there, and nothing for one deleted.
	if n := count(t, db, "SELECT count(*) FROM pepsi.message_row($1)", ids[3]); n != 1 {
		t.Errorf("pepsi.message_row(%d): %d rows, want 1", ids[3], n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message_row($1)", ids[0]); n != 0 {
		t.Errorf("pepsi.message_row(%d) of a deleted message: %d rows", ids[0], n)
	}
	c, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 10}}, nil)
	if err != nil || len(c) != 2 {
		t.Fatalf("claim of the moved messages: %+v, %v", c, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message"); n != 2 {
		t.Errorf("%d messages, want the 2 moved", n)
	}

	// Ids drawn past every range land in the default partition; the next
	// ranges start a width past the sequence.
	exec(t, db, "SELECT setval('pepsi.message_id_seq', 50000)")
	late := seed1(t, db, "a", queue.Pending)
	if p := messagePartition(t, db, late); p != "pepsi.message_default" {
		t.Errorf("message %d past the ranges in %s", late, p)
	}
	if n, seq, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 3 || seq != late {
		t.Fatalf("MessageAhead past the ranges = %d, %d, %v", n, seq, err)
	}
	if got := messageRanges(t, db); len(got) != 5 || got[2] != "message_52001_54001" {
		t.Errorf("ranges: %v; want 2 behind, then three of 2000 from 52001", got)
	}
	// The ranges behind, drawn and empty, go.
	if n, _, err := db.RetireMessages(ctx, 0, 10); err != nil || n != 2 {
		t.Errorf("RetireMessages of the two drawn, empty ranges = %d, %v", n, err)
	}
}

// TestMigrateMessageRanges: 012 on a populated database makes the table
// as it was the first range, keeps the sequence's value and grants, and
// pepsi.enqueue() and the admission go on from there; the first range
// goes once its messages have.
func TestMigrateMessageRanges(t *testing.T) {
	ctx, _, conn, known := migratedTo(t, 11)
	rows := migrateRows(t)
	if _, err := conn.Exec(ctx, "GRANT USAGE ON SEQUENCE pepsi.message_id_seq TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	took := migratePopulated(t, ctx, conn, 11, known, rows)
	t.Logf("012 on a database of %d messages: %v", rows, took.Round(time.Millisecond))
	var first string
	var n int64
	if err := conn.QueryRow(ctx, "SELECT tableoid::regclass::text, count(*) FROM pepsi.message GROUP BY 1").Scan(&first, &n); err != nil {
		t.Fatal(err)
	}
	if want := "pepsi.message_0_" + strconv.Itoa(rows+1); first != want || n != int64(rows) {
		t.Fatalf("after 012: %d messages in %s, want %d in %s", n, first, rows, want)
	}
	var public bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_class c, aclexplode(c.relacl) a
		WHERE c.oid = 'pepsi.message_id_seq'::regclass AND a.grantee = 0 AND a.privilege_type = 'USAGE')`).Scan(&public); err != nil || !public {
		t.Fatalf("USAGE for PUBLIC on the sequence after 012: %v, %v", public, err)
	}
	var id int64
	if err := conn.QueryRow(ctx, "SELECT pepsi.enqueue('a', 'new')").Scan(&id); err != nil || id != int64(rows)+1 {
		t.Fatalf("enqueue after 012: id %d, %v; want %d", id, err, rows+1)
	}
	if _, err := conn.Exec(ctx, "SELECT pepsi.admit(10)"); err != nil {
		t.Fatal(err)
	}
	var part string
	if err := conn.QueryRow(ctx, "SELECT tableoid::regclass::text FROM pepsi.message WHERE id = $1", id).Scan(&part); err != nil ||
		part != "pepsi.message_"+strconv.Itoa(rows+1)+"_"+strconv.Itoa(rows+10001) {
		t.Fatalf("the new message in %s, %v", part, err)
	}
	// The old messages go (as retention takes them); then their range.
	if _, err := conn.Exec(ctx, "DELETE FROM pepsi.message WHERE id <= $1", rows); err != nil {
		t.Fatal(err)
	}
	var dropped int
	if err := conn.QueryRow(ctx, "SELECT dropped FROM pepsi.message_retire(0, 4)").Scan(&dropped); err != nil || dropped != 1 {
		t.Fatalf("retire after 012: %d, %v; want the first range", dropped, err)
	}
}

// TestMessageRangesBlocked: a range that cannot be made or dropped at once
// (a reader holds pepsi.message past the lock timeout, or ids already
// drawn into the default partition fall inside it) is left for the next
// walk without an error, and made or dropped then.
func TestMessageRangesBlocked(t *testing.T) {
	db, _, ctx := newDB(t)
	exec(t, db, "SELECT setval('pepsi.message_id_seq', 25000)")

	// A reader's open transaction holds the table: the sweep waits 200 ms
	// for its lock, then leaves the range to the next walk.
	reader, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM pepsi.message"); err != nil {
		t.Fatal(err)
	}
	if n, _, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 0 {
		t.Fatalf("MessageAhead with a reader = %d, %v; want none and no error", n, err)
	}
	if n, _, err := db.RetireMessages(ctx, 0, 4); err != nil || n != 0 {
		t.Fatalf("RetireMessages with a reader = %d, %v; want none and no error", n, err)
	}
	if err := reader.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 3 {
		t.Fatalf("MessageAhead once the reader is gone = %d, %v; want 3", n, err)
	}
	if n, _, err := db.RetireMessages(ctx, 0, 4); err != nil || n != 2 {
		t.Fatalf("RetireMessages once the reader is gone = %d, %v; want the 2 drawn ranges", n, err)
	}

	// An id past the ranges (drawn while none was ahead) is in the default
	// partition; the range that would hold it is not made while it is
	// there, and the next ranges start past the sequence once it is drawn.
	exec(t, db, "INSERT INTO pepsi.message (id) VALUES (65000)")
	exec(t, db, "SELECT setval('pepsi.message_id_seq', 45000)")
	if n, _, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 0 {
		t.Fatalf("MessageAhead over a row in the default partition = %d, %v; want none and no error", n, err)
	}
	if got := messageRanges(t, db); got[len(got)-1] != "message_50001_60001" {
		t.Fatalf("ranges: %v; want the last 50001 to 60001", got)
	}
	exec(t, db, "SELECT setval('pepsi.message_id_seq', 65000)")
	if n, _, err := db.MessageAhead(ctx, 0, 3); err != nil || n != 3 {
		t.Fatalf("MessageAhead past the row = %d, %v; want 3", n, err)
	}
	if got := messageRanges(t, db); got[len(got)-3] != "message_75000_85000" || got[len(got)-1] != "message_95000_105000" {
		t.Errorf("ranges: %v; want the last three from 75000", got)
	}
	if p := messagePartition(t, db, 65000); p != "pepsi.message_default" {
		t.Errorf("message 65000 in %s", p)
	}
}
