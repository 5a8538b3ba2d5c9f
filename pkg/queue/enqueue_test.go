package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func TestEnqueueInApplicationTx(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	// Rolled back with the application's transaction: nothing inserted.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := queue.Enqueue(ctx, tx, "a", []byte("x"), map[string]string{"k": "v"})
	if err != nil || id <= 0 {
		t.Fatalf("Enqueue in tx: %d, %v", id, err)
	}
	// One row, in pepsi.ingress until admitted.
	var inTx int
	err = tx.QueryRow(ctx, "SELECT count(*) FROM pepsi.ingress WHERE id = $1 AND stage = 'a'", id).Scan(&inTx)
	if rb := tx.Rollback(ctx); rb != nil {
		t.Fatal(rb)
	}
	if err != nil || inTx != 1 {
		t.Fatalf("row inside the transaction: %d, %v", inTx, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message") + count(t, db, "SELECT count(*) FROM pepsi.state") +
		count(t, db, "SELECT count(*) FROM pepsi.ingress"); n != 0 {
		t.Fatalf("%d rows left after rollback", n)
	}

	// Committed: there, with payload and headers.
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := queue.Enqueue(ctx, tx, "b", []byte{0, 1, 2}, map[string]string{"trace": "t-1", "ü": "\"q\""})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if id2 <= id {
		t.Fatalf("id %d after rolled-back %d", id2, id)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state"); n != 0 {
		t.Fatalf("%d queue rows before admission", n)
	}
	if n, err := db.Admit(ctx); err != nil || n != 1 {
		t.Fatalf("Admit: %d, %v; want 1", n, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.ingress"); n != 0 {
		t.Fatalf("%d rows left in pepsi.ingress after admission", n)
	}
	r := getState(t, db, id2)
	if r.Stage != "b" || r.Status != queue.Pending {
		t.Fatalf("state %+v", r)
	}
	p, err := payload(ctx, db, id2)
	if err != nil || !bytes.Equal(p, []byte{0, 1, 2}) {
		t.Fatalf("payload %x, %v", p, err)
	}
	var h map[string]string
	if err := db.Pool.QueryRow(ctx, "SELECT headers FROM pepsi.message WHERE id = $1", id2).Scan(&h); err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h["trace"] != "t-1" || h["ü"] != "\"q\"" {
		t.Fatalf("headers %v", h)
	}

	// Straight on the pool, nil payload and headers.
	id3, err := queue.Enqueue(ctx, db.Pool, "c", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Admit(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := payload(ctx, db, id3); err != nil || p == nil || len(p) != 0 {
		t.Fatalf("nil payload stored as %v, %v; want empty", p, err)
	}
	// An empty stage is refused.
	if _, err := queue.Enqueue(ctx, db.Pool, "", nil, nil); err == nil {
		t.Fatal("Enqueue at an empty stage: nil error")
	}
}

func TestEnqueueBulk(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789\x00\xff"), 100_000)
	payloads := [][]byte{[]byte("hello"), {}, nil, binary, big, []byte("\\x00 not hex"), {0}}
	var progress []int
	headers := map[string]string{"source": "test", "n": "1"}
	ids, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "in", Headers: headers, Payloads: payloads,
		Progress: func(n int) { progress = append(progress, n) }})
	if err != nil {
		t.Fatalf("EnqueueBulk: %v", err)
	}
	if len(ids) != len(payloads) {
		t.Fatalf("got %d ids for %d payloads", len(ids), len(payloads))
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids %v not in increasing order", ids)
		}
	}
	if len(progress) == 0 || progress[len(progress)-1] != len(payloads) {
		t.Fatalf("Progress calls %v, want the last to be %d", progress, len(payloads))
	}
	for i, id := range ids {
		p, err := payload(ctx, db, id)
		if err != nil {
			t.Fatal(err)
		}
		want := payloads[i]
		if want == nil {
			want = []byte{}
		}
		if !bytes.Equal(p, want) {
			t.Fatalf("payload %d (id %d): %d bytes differ from the %d sent", i, id, len(p), len(want))
		}
		var raw []byte
		if err := db.Pool.QueryRow(ctx, "SELECT headers::text FROM pepsi.message WHERE id = $1", id).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var h map[string]string
		if err := json.Unmarshal(raw, &h); err != nil || len(h) != 2 || h["source"] != "test" || h["n"] != "1" {
			t.Fatalf("headers of %d: %s, %v", id, raw, err)
		}
		if r := getState(t, db, id); r.Stage != "in" || r.Status != queue.Pending || r.Attempts != 0 {
			t.Fatalf("state of %d: %+v", id, r)
		}
	}
	// Headers are stored as a jsonb object, not as a string.
	if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE jsonb_typeof(headers) = 'object' AND headers->>'source' = 'test'"); n != int64(len(ids)) {
		t.Fatalf("%d rows with object headers, want %d", n, len(ids))
	}

	// Without headers: {}.
	ids2, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "in", Payloads: [][]byte{[]byte("x")}})
	if err != nil || len(ids2) != 1 || ids2[0] <= ids[len(ids)-1] {
		t.Fatalf("second bulk: %v, %v", ids2, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE id = $1 AND headers = '{}'", ids2[0]); n != 1 {
		t.Fatal("bulk without headers: headers not {}")
	}

	// Many rows: progress counts up to the total.
	many := make([][]byte, 25_000)
	progress = nil
	ids3, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "many", Payloads: many, Progress: func(n int) { progress = append(progress, n) }})
	if err != nil || len(ids3) != len(many) {
		t.Fatalf("bulk of %d: %d ids, %v", len(many), len(ids3), err)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] < progress[i-1] || progress[i] > len(many) {
			t.Fatalf("progress %v not increasing up to %d", progress, len(many))
		}
	}
	if len(progress) < 2 || progress[len(progress)-1] != len(many) {
		t.Fatalf("progress %v, want intermediate counts and %d last", progress, len(many))
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE stage = 'many' AND status = 'pending'"); n != int64(len(many)) {
		t.Fatalf("%d pending rows at many, want %d", n, len(many))
	}

	before := count(t, db, "SELECT count(*) FROM pepsi.message")
	if ids, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "in"}); err == nil {
		t.Fatalf("empty bulk: %v, nil error", ids)
	}
	if ids, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "", Payloads: [][]byte{nil}}); err == nil {
		t.Fatalf("bulk at an empty stage: %v, nil error", ids)
	}
	if after := count(t, db, "SELECT count(*) FROM pepsi.message"); after != before {
		t.Fatalf("failed bulks inserted %d rows", after-before)
	}
}

// A bulk that fails half way inserts nothing.
func TestEnqueueBulkAtomic(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ids, err := db.EnqueueBulk(cctx, queue.Bulk{Stage: "a", Payloads: make([][]byte, 30_000),
		Progress: func(n int) {
			if n < 30_000 {
				cancel() // fail the COPY part way through
			}
		}})
	if err == nil {
		t.Fatalf("cancelled bulk returned %d ids, nil error", len(ids))
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message") + count(t, db, "SELECT count(*) FROM pepsi.state"); n != 0 {
		t.Fatalf("cancelled bulk left %d rows", n)
	}
}
