package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func dial(t *testing.T, dsn, channel string) *queue.Listener {
	t.Helper()
	ctx := testCtx(t)
	l, err := queue.Dial(ctx, dsn, channel)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func TestListenerLock(t *testing.T) {
	t.Parallel()
	_, dsn, ctx := newDB(t)
	first := dial(t, dsn, "pepsi_ingress")
	if holder, err := first.TryLock(ctx); err != nil || holder != 0 {
		t.Fatalf("first TryLock = %d, %v; want the lock", holder, err)
	}
	if ok, err := first.HoldsLock(ctx); err != nil || !ok {
		t.Fatalf("first HoldsLock = %v, %v", ok, err)
	}
	// Taking it again on the same session is fine.
	if _, err := first.TryLock(ctx); err != nil {
		t.Fatalf("first TryLock again: %v", err)
	}

	second := dial(t, dsn, "pepsi_ingress")
	holder, err := second.TryLock(ctx)
	if !errors.Is(err, queue.ErrLocked) {
		t.Fatalf("second TryLock: %v, want ErrLocked", err)
	}
	if holder != int32(first.PID()) || holder == 0 {
		t.Fatalf("holder = %d, want the first session's pid %d", holder, first.PID())
	}
	if ok, err := second.HoldsLock(ctx); err != nil || ok {
		t.Fatalf("second HoldsLock = %v, %v", ok, err)
	}

	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The server releases the lock when it notices the session is gone.
	var err2 error
	testkit.Wait(t, "the lock to be released", 10*time.Second, func() bool {
		_, err2 = second.TryLock(ctx)
		return err2 == nil
	})
	if ok, err := second.HoldsLock(ctx); err != nil || !ok {
		t.Fatalf("second HoldsLock after the first closed = %v, %v", ok, err)
	}
}

// The lock is per database: dispatchers of two databases do not meet.
func TestListenerLockPerDatabase(t *testing.T) {
	t.Parallel()
	_, dsn1, ctx := newDB(t)
	_, dsn2, _ := newDB(t)
	if _, err := dial(t, dsn1, "c").TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, dsn2, "c").TryLock(ctx); err != nil {
		t.Fatalf("TryLock on another database: %v", err)
	}
}

func TestListenerWaitLock(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	first := dial(t, dsn, "pepsi_ingress")
	if _, err := first.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	second := dial(t, dsn, "pepsi_ingress")
	done := make(chan error, 1)
	go func() { done <- second.WaitLock(ctx) }()

	// Wait until the second session is blocked on the lock...
	testkit.Wait(t, "the second session to wait for the lock", 10*time.Second, func() bool {
		return count(t, db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = $1", int32(second.PID())) == 1
	})
	// ...and it has not returned.
	select {
	case err := <-done:
		t.Fatalf("WaitLock returned %v while the lock was held", err)
	default:
	}

	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitLock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitLock did not return after the holder closed")
	}
	if ok, err := second.HoldsLock(ctx); err != nil || !ok {
		t.Fatalf("HoldsLock after WaitLock = %v, %v", ok, err)
	}

	// WaitLock gives up with its context.
	third := dial(t, dsn, "pepsi_ingress")
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := third.WaitLock(cctx); err == nil {
		t.Fatal("WaitLock with an expiring context took a held lock")
	}
}

func TestListenerWait(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	l := dial(t, dsn, "pepsi_ingress")
	if err := l.Listen(ctx, true); err != nil {
		t.Fatal(err)
	}

	// Timeout: (false, nil), and the session is still usable.
	start := time.Now()
	got, err := l.Wait(ctx, 100*time.Millisecond)
	if err != nil || got {
		t.Fatalf("Wait with nothing sent = %v, %v; want false, nil", got, err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("Wait returned after %v, before its timeout", el)
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping after a Wait timeout: %v", err)
	}
	if _, err := l.TryLock(ctx); err != nil {
		t.Fatalf("TryLock after a Wait timeout: %v", err)
	}

	// A notification from another session wakes it (producers notify
	// while a dispatcher is armed).
	if err := db.SetArmed(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		got, err := l.Wait(ctx, 30*time.Second)
		if err == nil && !got {
			err = errors.New("Wait timed out")
		}
		done <- err
	}()
	if _, err := queue.Enqueue(ctx, db.Pool, "a", nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake on a notification")
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	// A cancelled context: its error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := l.Wait(cctx, time.Second); got || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v, %v", got, err)
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping after a cancelled Wait: %v", err)
	}
}

// A notification that arrives while the session runs a statement (the
// heartbeat, the lock check) must still wake the next Wait, once.
func TestListenerWaitAfterBusy(t *testing.T) {
	t.Parallel()
	_, dsn, ctx := newDB(t)
	l := dial(t, dsn, "pepsi_ingress")
	if err := l.Listen(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The session's own NOTIFY is delivered before its statement completes,
	// so it is read while the statement runs, not while waiting.
	if err := l.ExecForTest(ctx, "SELECT pg_notify('pepsi_ingress', 'one')"); err != nil {
		t.Fatal(err)
	}
	if err := l.ExecForTest(ctx, "SELECT pg_notify('pepsi_ingress', 'two')"); err != nil {
		t.Fatal(err)
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		got, err := l.Wait(ctx, 5*time.Second)
		if err != nil || !got {
			t.Fatalf("Wait %d after notifications arrived during statements = %v, %v; want true", i, got, err)
		}
	}
	if got, err := l.Wait(ctx, 50*time.Millisecond); err != nil || got {
		t.Fatalf("third Wait = %v, %v; want false: each notification wakes once", got, err)
	}
}

// A session that fails makes Wait return an error, not a timeout.
func TestListenerWaitSessionGone(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	l := dial(t, dsn, "pepsi_ingress")
	if err := l.Listen(ctx, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Wait(ctx, 30*time.Second)
		done <- err
	}()
	exec(t, db, "SELECT pg_terminate_backend($1)", int32(l.PID()))
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Wait on a terminated session: nil error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not notice the terminated session")
	}
	if err := l.Ping(ctx); err == nil {
		t.Fatal("Ping on a terminated session: nil error")
	}
}

func TestListenerPing(t *testing.T) {
	t.Parallel()
	_, dsn, ctx := newDB(t)
	l := dial(t, dsn, "pepsi_ingress")
	if err := l.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if l.PID() == 0 {
		t.Fatal("PID is 0")
	}
}

// TestConnectionLimit: the limit is the server's settings, whatever the
// version (reserved_connections exists from PostgreSQL 16).
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	c, err := dial(t, dsn, "pepsi_ingress").ConnectionLimit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var maxConns, su, reserved int
	if err := db.Pool.QueryRow(ctx, `SELECT
		(SELECT setting::int FROM pg_settings WHERE name = 'max_connections'),
		(SELECT setting::int FROM pg_settings WHERE name = 'superuser_reserved_connections'),
		coalesce((SELECT setting::int FROM pg_settings WHERE name = 'reserved_connections'), 0)`).Scan(&maxConns, &su, &reserved); err != nil {
		t.Fatal(err)
	}
	want := queue.ConnLimit{MaxConnections: maxConns, SuperuserReserved: su, Reserved: reserved}
	if c != want || c.Available() != maxConns-su-reserved || c.Available() <= 0 {
		t.Errorf("ConnectionLimit = %+v (available %d), want %+v", c, c.Available(), want)
	}
}
