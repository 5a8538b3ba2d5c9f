package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestDispatcherSessions: the holder of the lock, with its pid and host
// read from the name Dial gives it, owning every stage, and the standbys
// that wait.
func TestDispatcherSessions(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	lk, err := db.DispatcherSessions(ctx, []string{"a", "b"})
	if err != nil || lk.Holder != nil || len(lk.Running) != 0 || len(lk.Owners) != 0 || len(lk.Standbys) != 0 {
		t.Fatalf("nobody: %+v, %v", lk, err)
	}
	holder := lockAsDispatcher(t, dsn)
	standby := dial(t, dsn, "pepsi_ingress")
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- standby.WaitLock(wctx) }()
	t.Cleanup(func() {
		cancel()
		<-waited
	})
	// pg_locks.waitstart is null for a moment after a wait begins, so the
	// standby counts as seen only once its wait has a start.
	testkit.Wait(t, "a standby waiting", 30*time.Second, func() bool {
		lk, err = db.DispatcherSessions(ctx, []string{"a", "b"})
		return err == nil && len(lk.Standbys) == 1 && lk.Standbys[0].WaitingSince != nil
	})
	h := lk.Holder
	if h == nil || h.ServerPID != int32(holder.PID()) || h.Since == nil || h.WaitingSince != nil || h.Host == "" || h.PID == 0 ||
		!h.All || !slices.Equal(h.Stages, []string{"a", "b"}) {
		t.Fatalf("holder: %+v", h)
	}
	if len(lk.Running) != 1 || lk.Owners["a"] != h || lk.Owners["b"] != h {
		t.Errorf("running %+v, owners %+v", lk.Running, lk.Owners)
	}
	s := lk.Standbys[0]
	if s.ServerPID != int32(standby.PID()) || s.PID != h.PID || s.Host != h.Host || s.WaitingSince == nil {
		t.Errorf("standby: %+v", s)
	}
	d, err := db.LockHolder(ctx)
	if err != nil || d == nil || d.PID != h.ServerPID || d.Name != h.Name {
		t.Errorf("LockHolder says %+v, %v", d, err)
	}
}

// TestDispatcherSessionsStageSets: dispatchers with stage sets, each
// owning its stages (in the order asked, the dispatchers in the order of
// their first stage), a stage nobody owns, and a standby waiting for one
// set's stage.
func TestDispatcherSessionsStageSets(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	b := dial(t, dsn, "c")
	if err := b.TakeStages(ctx, []string{"b"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	ac := dial(t, dsn, "c")
	if err := ac.TakeStages(ctx, []string{"a", "c"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	standby := dial(t, dsn, "c")
	if err := standby.TakeStages(ctx, []string{"b"}, false, queue.NewToken()); err == nil {
		t.Fatal("a second owner of b")
	}
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- standby.WaitFor(wctx, "b", false) }()
	t.Cleanup(func() {
		cancel()
		<-waited
	})
	stages := []string{"a", "b", "c", "d"}
	var lk admin.Dispatchers
	var err error
	testkit.Wait(t, "a standby waiting", 30*time.Second, func() bool {
		lk, err = db.DispatcherSessions(ctx, stages)
		return err == nil && len(lk.Standbys) == 1 && lk.Standbys[0].WaitingSince != nil
	})
	if lk.Holder != nil || len(lk.Running) != 2 {
		t.Fatalf("dispatchers %+v", lk)
	}
	first, second := lk.Running[0], lk.Running[1]
	if first.ServerPID != int32(ac.PID()) || !slices.Equal(first.Stages, []string{"a", "c"}) || first.All || first.PID == 0 ||
		second.ServerPID != int32(b.PID()) || !slices.Equal(second.Stages, []string{"b"}) {
		t.Errorf("running %+v", lk.Running)
	}
	if lk.Owners["a"].ServerPID != int32(ac.PID()) || lk.Owners["b"].ServerPID != int32(b.PID()) || lk.Owners["d"] != nil {
		t.Errorf("owners %+v", lk.Owners)
	}
	if s := lk.Standbys[0]; s.ServerPID != int32(standby.PID()) || s.WaitsFor != "b" || s.WaitingSince == nil {
		t.Errorf("standby %+v", s)
	}
}

// TestOwners: each stage asked about that a dispatcher owns, with the
// session that owns it; none for a stage nobody owns.
func TestOwners(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	a := dial(t, dsn, "c")
	if err := a.TakeStages(ctx, []string{"parse", "enrich"}, false, queue.NewToken()); err != nil {
		t.Fatalf("first set: %v", err)
	}
	c := dial(t, dsn, "c")
	if err := c.TakeStages(ctx, []string{"deliver"}, false, queue.NewToken()); err != nil {
		t.Fatalf("second set: %v", err)
	}
	owners, err := db.Owners(ctx, []string{"parse", "enrich", "deliver", "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	if owners["parse"].PID != int32(a.PID()) || owners["deliver"].PID != int32(c.PID()) {
		t.Errorf("owners %+v", owners)
	}
	if _, ok := owners["nobody"]; ok {
		t.Errorf("a stage nobody owns has an owner: %+v", owners["nobody"])
	}
}
