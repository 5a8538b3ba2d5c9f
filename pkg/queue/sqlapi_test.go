package queue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func sqlState(err error) string {
	code, _ := pgerr.SQLState(err)
	return code
}

func TestSQLEnqueue(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	var prev int64
	for i, stage := range []string{"a", "b", "a"} {
		var id int64
		before := serverNow(t, db)
		if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue($1, $2, $3)", stage, []byte{byte(i), 0, 0xff}, `{"k":"v"}`).Scan(&id); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		if id <= prev {
			t.Fatalf("id %d after %d: ids must increase", id, prev)
		}
		prev = id
		admit(t, db)
		r := getState(t, db, id)
		if r.Stage != stage || r.Status != queue.Pending || r.Attempts != 0 || r.Timeout != nil || r.Error != nil || r.DispatchError != nil {
			t.Fatalf("state of %d = %+v, want fresh pending at %q", id, r, stage)
		}
		if r.UpdatedAt.Before(before.Add(-time.Second)) {
			t.Fatalf("updated_at %v is before the enqueue (%v)", r.UpdatedAt, before)
		}
		var payload []byte
		var headers map[string]string
		if err := db.Pool.QueryRow(ctx, "SELECT payload, headers FROM pepsi.message WHERE id = $1", id).Scan(&payload, &headers); err != nil {
			t.Fatal(err)
		}
		if string(payload) != string([]byte{byte(i), 0, 0xff}) || headers["k"] != "v" || len(headers) != 1 {
			t.Fatalf("message %d = %x %v", id, payload, headers)
		}
	}

	// Defaults and NULLs: empty payload and headers.
	var id int64
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue('a', NULL, NULL)").Scan(&id); err != nil {
		t.Fatalf("enqueue with NULLs: %v", err)
	}
	admit(t, db)
	var n int
	var h string
	if err := db.Pool.QueryRow(ctx, "SELECT octet_length(payload), headers::text FROM pepsi.message WHERE id = $1", id).Scan(&n, &h); err != nil {
		t.Fatal(err)
	}
	if n != 0 || h != "{}" {
		t.Fatalf("NULL payload/headers stored as %d bytes, %s", n, h)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue('a')").Scan(&id); err != nil {
		t.Fatalf("enqueue with defaults: %v", err)
	}

	// A stage the rest of pepsi could not name is refused (protocol.CheckStage),
	// with and without a deduplication key; a key over 1024 bytes too.
	for _, stage := range []any{"", nil, "stage with spaces", strings.Repeat("s", 64), "é", "a;b"} {
		for _, key := range []any{nil, "k"} {
			_, err := db.Pool.Exec(ctx, "SELECT pepsi.enqueue($1::text, ''::bytea, '{}'::jsonb, 0, $2)", stage, key)
			if sqlState(err) != pgerrcode.InvalidParameterValue {
				t.Fatalf("enqueue at stage %v, key %v: %v, want SQLSTATE 22023", stage, key, err)
			}
		}
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.enqueue('a', ''::bytea, '{}'::jsonb, 0, $1)", strings.Repeat("k", 1025)); sqlState(err) != pgerrcode.InvalidParameterValue {
		t.Fatalf("enqueue with a key of 1025 bytes: %v, want SQLSTATE 22023", err)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue($1, ''::bytea, '{}'::jsonb, 0, $2)", strings.Repeat("s", 63), strings.Repeat("k", 1024)).Scan(&id); err != nil {
		t.Fatalf("enqueue at a 63-byte stage with a 1024-byte key: %v", err)
	}
}

// Each transition works on a running row only; on any other row (or no row)
// it raises 55000 and changes nothing.
func TestSQLTransitions(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	type call struct {
		name string
		sql  string
		args []any
	}
	calls := []call{
		{"advance", "SELECT pepsi.advance($1, 'next')", nil},
		{"finish", "SELECT pepsi.finish($1)", nil},
		{"pause", "SELECT pepsi.pause($1, interval '90 seconds')", nil},
		{"fail", "SELECT pepsi.fail($1, 'bad input')", nil},
	}
	for _, c := range calls {
		for _, st := range []queue.Status{queue.Pending, queue.Paused, queue.Done, queue.Failed} {
			id := seed1(t, db, "s", st)
			before := getState(t, db, id)
			_, err := db.Pool.Exec(ctx, c.sql, id)
			if sqlState(err) != pgerrcode.ObjectNotInPrerequisiteState {
				t.Errorf("%s on a %s row: %v, want SQLSTATE 55000", c.name, st, err)
			}
			if after := getState(t, db, id); after.Status != before.Status || after.Stage != before.Stage ||
				!after.UpdatedAt.Equal(before.UpdatedAt) || deref(after.Error) != deref(before.Error) {
				t.Errorf("%s on a %s row changed it: %+v → %+v", c.name, st, before, after)
			}
		}
		if _, err := db.Pool.Exec(ctx, c.sql, int64(1<<40)); sqlState(err) != pgerrcode.ObjectNotInPrerequisiteState {
			t.Errorf("%s on a missing row: %v, want SQLSTATE 55000", c.name, err)
		}
	}

	// advance: pending at the new stage, its attempts at 0 and its pass
	// booked requeued; a second move of the pass is refused.
	id := seed1(t, db, "s", queue.Running)
	exec(t, db, "UPDATE pepsi.state SET attempts = 2, pass = 77, handed = 's' WHERE id = $1", id)
	for _, stage := range []string{"", "a b", strings.Repeat("s", 64)} {
		if _, err := db.Pool.Exec(ctx, "SELECT pepsi.advance($1, $2)", id, stage); sqlState(err) != pgerrcode.InvalidParameterValue {
			t.Fatalf("advance to stage %q: %v, want 22023", stage, err)
		}
	}
	// To the stage it was handed at: no move, the row stays running (the
	// settle fails it as a pass that did not move its message).
	exec(t, db, "SELECT pepsi.advance($1, 's')", id)
	if r := getState(t, db, id); r.Status != queue.Running || r.Stage != "s" || r.Attempts != 2 {
		t.Fatalf("after advance to its own stage: %+v, want running at s", r)
	}
	exec(t, db, "SELECT pepsi.advance($1, 'next')", id)
	if r := getState(t, db, id); r.Status != queue.Pending || r.Stage != "next" || r.Attempts != 0 {
		t.Fatalf("after advance: %+v, want pending at next, attempts 0", r)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = $1 AND ended = 77 AND ended_as = 'q' AND handed IS NULL", id); n != 1 {
		t.Fatal("after advance: the pass is not booked requeued, or the row is still handed out")
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.advance($1, 'third')", id); sqlState(err) != pgerrcode.ObjectNotInPrerequisiteState {
		t.Fatalf("a second advance: %v, want SQLSTATE 55000", err)
	}

	// finish: done.
	id = seed1(t, db, "s", queue.Running)
	exec(t, db, "SELECT pepsi.finish($1)", id)
	if r := getState(t, db, id); r.Status != queue.Done || r.Stage != "s" {
		t.Fatalf("after finish: %+v, want done", r)
	}

	// pause: paused until now() + delay.
	id = seed1(t, db, "s", queue.Running)
	before := serverNow(t, db)
	exec(t, db, "SELECT pepsi.pause($1, interval '90 seconds')", id)
	after := serverNow(t, db)
	r := getState(t, db, id)
	if r.Status != queue.Paused || r.Timeout == nil {
		t.Fatalf("after pause: %+v, want paused with a timeout", r)
	}
	if lo, hi := before.Add(90*time.Second), after.Add(90*time.Second); r.Timeout.Before(lo) || r.Timeout.After(hi) {
		t.Fatalf("pause timeout %v, want within [%v, %v]", *r.Timeout, lo, hi)
	}
	// A delay of 0 pauses until now; NULL or a negative one is refused and
	// leaves the row running.
	id = seed1(t, db, "s", queue.Running)
	for _, delay := range []string{"NULL", "interval '-1 second'", "interval '-1 day 2 hours'"} {
		if _, err := db.Pool.Exec(ctx, "SELECT pepsi.pause($1, "+delay+")", id); sqlState(err) != pgerrcode.InvalidParameterValue {
			t.Fatalf("pause with delay %s: %v, want 22023", delay, err)
		}
		if r := getState(t, db, id); r.Status != queue.Running {
			t.Fatalf("after a refused pause with delay %s: %+v, want running", delay, r)
		}
	}
	exec(t, db, "SELECT pepsi.pause($1, '0')", id)
	if r := getState(t, db, id); r.Status != queue.Paused || r.Timeout == nil || r.Timeout.After(serverNow(t, db)) {
		t.Fatalf("after pause with delay 0: %+v", r)
	}

	// fail: failed, error = reason.
	id = seed1(t, db, "s", queue.Running)
	exec(t, db, "SELECT pepsi.fail($1, 'bad input')", id)
	if r := getState(t, db, id); r.Status != queue.Failed || deref(r.Error) != "bad input" || r.DispatchError != nil {
		t.Fatalf("after fail: %+v, want failed with error", r)
	}
}

// waitNotification waits up to d for the next notification on conn.
func waitNotification(t testing.TB, conn *pgx.Conn, d time.Duration) *pgconn.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification within %v: %v", d, err)
	}
	return n
}

// expectOnly checks that, of everything sent on channel so far, conn gets
// exactly want notifications: it sends a sentinel after them (delivery
// follows commit order) and expects the sentinel next.
func expectOnly(t testing.TB, db *pgtest.DB, conn *pgx.Conn, channel string, want int) {
	t.Helper()
	exec(t, db, "SELECT pg_notify($1, 'sentinel')", channel)
	for i := 0; ; i++ {
		n := waitNotification(t, conn, 10*time.Second)
		if n.Payload == "sentinel" {
			if i != want {
				t.Fatalf("got %d notifications on %s before the sentinel, want %d", i, channel, want)
			}
			return
		}
		if n.Channel != channel {
			t.Fatalf("notification on %q, want %q", n.Channel, channel)
		}
	}
}

func TestIngressNotify(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)

	// The trigger is AFTER INSERT FOR EACH STATEMENT (one NOTIFY per
	// statement, not per row: duplicates within one transaction are
	// folded by the server, so only the catalog can tell).
	var tgtype int16
	if err := db.Pool.QueryRow(ctx, "SELECT tgtype FROM pg_trigger WHERE tgrelid = 'pepsi.state'::regclass AND tgname = 'state_ingress'").Scan(&tgtype); err != nil {
		t.Fatal(err)
	}
	const rowLevel, before, insert = 1 << 0, 1 << 1, 1 << 2
	if tgtype&rowLevel != 0 || tgtype&before != 0 || tgtype&insert == 0 {
		t.Fatalf("state_ingress tgtype = %b, want AFTER INSERT FOR EACH STATEMENT", tgtype)
	}
	// Neither ingress trigger has a WHEN: a WHEN is compiled anew for
	// every statement (migration 010); the function reads the flag.
	var whens int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger
		WHERE tgname IN ('state_ingress', 'state_live_ingress') AND tgqual IS NOT NULL`).Scan(&whens); err != nil {
		t.Fatal(err)
	}
	if whens != 0 {
		t.Fatalf("%d ingress triggers have a WHEN, want none", whens)
	}

	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "LISTEN pepsi_ingress"); err != nil {
		t.Fatal(err)
	}
	// A new database, where no dispatcher has run, notifies nobody: no
	// dispatcher listens, and a starting one claims before it waits.
	if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 0)
	if err := db.SetArmed(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	ids, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: [][]byte{[]byte("1"), []byte("2"), []byte("3")}})
	if err != nil || len(ids) != 3 {
		t.Fatalf("EnqueueBulk: %v %v", ids, err)
	}
	if n := waitNotification(t, conn, 10*time.Second); n.Channel != "pepsi_ingress" {
		t.Fatalf("notification on %q", n.Channel)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 0)

	// Three single enqueues in three transactions: three notifications.
	// Three rows in one INSERT statement: one.
	for range 3 {
		if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	exec(t, db, `WITH m AS (INSERT INTO pepsi.message DEFAULT VALUES RETURNING id),
	                  m2 AS (INSERT INTO pepsi.message DEFAULT VALUES RETURNING id)
	             INSERT INTO pepsi.state (id, stage) SELECT id, 'a' FROM m UNION ALL SELECT id, 'a' FROM m2`)
	expectOnly(t, db, conn, "pepsi_ingress", 4)

	// A rolled-back enqueue notifies nobody.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Enqueue(ctx, tx, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 0)

	// While the wake flag is off (a busy dispatcher polls) nothing
	// notifies; with it on again, or never set (the count producers read
	// is an unlogged sequence: a crash resets it), every statement does.
	if err := db.SetArmed(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: [][]byte{[]byte("1")}}); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 0)
	if err := db.SetArmed(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 1)
	if err := db.SetArmed(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "DELETE FROM pepsi.wake")
	exec(t, db, "ALTER SEQUENCE pepsi.wake_armed RESTART")
	if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 1)
	if _, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: [][]byte{[]byte("1")}}); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 1)
	if err := db.SetArmed(ctx, "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, db, conn, "pepsi_ingress", 0)
	if err := db.SetArmed(ctx, "", true); err != nil {
		t.Fatal(err)
	}

	// The listener moves the channel: the trigger follows the setting.
	l, err := queue.Dial(ctx, dsn, "pepsi_other")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	if err := l.Listen(ctx, true); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	var channel string
	if err := db.Pool.QueryRow(ctx, "SELECT ingress_channel FROM pepsi.settings").Scan(&channel); err != nil || channel != "pepsi_other" {
		t.Fatalf("settings.ingress_channel = %q, %v; want pepsi_other", channel, err)
	}
	if _, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: [][]byte{nil, nil, nil}}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Wait(ctx, 10*time.Second)
	if err != nil || !got {
		t.Fatalf("Wait on the new channel: %v, %v; want a notification", got, err)
	}
	if got, err := l.Wait(ctx, 50*time.Millisecond); err != nil || got {
		t.Fatalf("second Wait: %v, %v; want one notification only", got, err)
	}
	// Nothing more on the old channel.
	expectOnly(t, db, conn, "pepsi_ingress", 0)
}
