package admin_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestDoctorPooler: on a direct connection the pooler check finds no
// pooler (the cancel key's pid is the server's process) and the
// dispatcher's session check passes. A pooler in transaction mode is
// contrib's TestDoctorPgBouncer (it needs a PgBouncer).
func TestDoctorPooler(t *testing.T) {
	_, dsn, ctx := newDB(t)
	p, err := admin.CheckPooler(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if p.Pooled || p.NoSession != nil || p.BackendPID == 0 || p.KeyPID != p.BackendPID {
		t.Errorf("direct connection: %+v (%v), want not pooled, the session check passed", p, p.NoSession)
	}
}

// TestDoctorNotifyRoundTrip: a NOTIFY on the ingress channel comes back
// to the doctor's own listening session, and the queue's use is read.
func TestDoctorNotifyRoundTrip(t *testing.T) {
	db, dsn, ctx := newDB(t)
	ch, err := db.IngressChannel(ctx)
	if err != nil || ch != "pepsi_ingress" {
		t.Fatalf("IngressChannel = %q, %v; want pepsi_ingress", ch, err)
	}
	rt, err := db.NotifyRoundTrip(ctx, dsn, ch, 30*time.Second)
	if err != nil || rt.Took <= 0 || rt.QueueUsage < 0 || rt.QueueUsage >= 0.5 {
		t.Errorf("NotifyRoundTrip = %+v, %v", rt, err)
	}
	// A wait that has already ended: the notification cannot be awaited.
	if _, err := db.NotifyRoundTrip(ctx, dsn, ch, 0); !errors.Is(err, admin.ErrNoNotification) {
		t.Errorf("NotifyRoundTrip with no wait: %v, want ErrNoNotification", err)
	}
}

// TestDoctorAdvisoryLocks: pepsi's locks are named by kind (a stage's by
// its stage), another application's is "other", waiters are listed after
// the holders.
func TestDoctorAdvisoryLocks(t *testing.T) {
	db, dsn, ctx := newDB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Spelled in decimal, as pkg/queue/locks.go's keys: stageLockClass,
	// janitorLock, and a key of an application's own.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(1885696115, hashtext('parse')), pg_advisory_lock(123580980619521), pg_advisory_lock(42)"); err != nil {
		t.Fatal(err)
	}
	locks, err := db.AdvisoryLocks(ctx, []string{"enrich", "parse"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range locks {
		if !l.Granted || l.Mode != "ExclusiveLock" {
			t.Errorf("%+v: want granted, exclusive", l)
		}
		kinds = append(kinds, l.Kind+":"+l.Stage)
	}
	slices.Sort(kinds)
	if want := []string{queue.LockJanitor + ":", queue.LockOther + ":", queue.LockStage + ":parse"}; !slices.Equal(kinds, want) {
		t.Errorf("locks %v, want %v", kinds, want)
	}
}

// TestDoctorXminHolders: a session idle in a transaction past the
// threshold is listed; none past a threshold it has not reached.
func TestDoctorXminHolders(t *testing.T) {
	db, dsn, ctx := newDB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT txid_current()) x").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if x, err := db.XminHolders(ctx, time.Hour); err != nil || !x.Empty() {
		t.Errorf("XminHolders(1h) = %+v, %v; want none", x, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		x, err := db.XminHolders(ctx, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(x.Sessions) == 1 && x.Sessions[0].PID == pid && x.Sessions[0].State == "idle in transaction" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("XminHolders(10ms) = %+v, want server pid %d idle in transaction", x, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
