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

// lockAsDispatcher takes the single-dispatcher lock the way a dispatcher
// does and returns its session.
func lockAsDispatcher(t *testing.T, dsn string) *queue.Listener {
	t.Helper()
	l := dial(t, dsn, "pepsi_ingress")
	if _, err := l.TryLock(testCtx(t)); err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	return l
}

// fakeDispatcher holds the single-dispatcher lock on a plain session, and
// can let go of it at once (closing a session releases its locks only when
// the server gets round to it).
type fakeDispatcher struct {
	conn *pgx.Conn
	pid  int32
}

func holdLock(t *testing.T, dsn string) *fakeDispatcher {
	t.Helper()
	conn := connect(t, dsn)
	if _, err := conn.Exec(testCtx(t), "SELECT pg_advisory_lock($1)", queue.DispatcherLock); err != nil {
		t.Fatal(err)
	}
	return &fakeDispatcher{conn, int32(conn.PgConn().PID())}
}

func (f *fakeDispatcher) release(t *testing.T) {
	t.Helper()
	var ok bool
	if err := f.conn.QueryRow(testCtx(t), "SELECT pg_advisory_unlock($1)", queue.DispatcherLock).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock: %v, %v", ok, err)
	}
}

// dirty gives rows the marks a redrive must clear.
func dirty(t *testing.T, db *testDB, ids []int64) {
	t.Helper()
	exec(t, db, `UPDATE pepsi.state SET attempts = 3, error = 'stage said no', dispatch_error = 'dispatcher said no',
		timeout = now() + interval '1 day', updated_at = now() - interval '1 hour' WHERE id = ANY($1)`, ids)
}

func statuses(t *testing.T, db *testDB, ids []int64) []queue.Status {
	t.Helper()
	out := make([]queue.Status, len(ids))
	for i, id := range ids {
		out[i] = getState(t, db, id).Status
	}
	return out
}

func TestRunningDispatcher(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	if d, err := db.LockHolder(ctx); err != nil || d != nil {
		t.Fatalf("no dispatcher: LockHolder = %+v, %v", d, err)
	}

	// A repair's shared transaction lock is not a dispatcher, and while it
	// is held no dispatcher can take the lock.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var free bool
	if err := tx.QueryRow(ctx, admin.TakeSharedSQL, queue.DispatcherLock).Scan(&free); err != nil || !free {
		t.Fatalf("shared lock with no dispatcher: %v, %v", free, err)
	}
	if d, err := db.LockHolder(ctx); err != nil || d != nil {
		t.Fatalf("a shared lock counted as a dispatcher: %+v, %v", d, err)
	}
	l := dial(t, dsn, "pepsi_ingress")
	if _, err := l.TryLock(ctx); !errors.Is(err, queue.ErrLocked) {
		t.Fatalf("TryLock while a repair holds the shared lock: %v, want ErrLocked", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := l.TryLock(ctx); err != nil {
		t.Fatalf("TryLock after the repair: %v", err)
	}
	d, err := db.LockHolder(ctx)
	if err != nil || d == nil || d.PID != int32(l.PID()) || d.Name == "" {
		t.Fatalf("LockHolder = %+v, %v", d, err)
	}

	// With the dispatcher running, the shared lock cannot be had.
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := tx.QueryRow(ctx, admin.TakeSharedSQL, queue.DispatcherLock).Scan(&free); err != nil || free {
		t.Fatalf("shared lock with a dispatcher: %v, %v", free, err)
	}
}

func TestRedriveByStatus(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	failedA := seed(t, db, "a", queue.Failed, 5)
	failedB := seed(t, db, "b", queue.Failed, 2)
	doneA := seed(t, db, "a", queue.Done, 2)
	runA := seed(t, db, "a", queue.Running, 1)
	dirty(t, db, slices.Concat(failedA, failedB, doneA))
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "LISTEN pepsi_ingress"); err != nil {
		t.Fatal(err)
	}

	var progress []int64
	res, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Failed, Stage: "a", Batch: 2,
		Progress: func(n int64) { progress = append(progress, n) }})
	if err != nil {
		t.Fatal(err)
	}
	if res != (admin.Repair{Changed: 5}) {
		t.Fatalf("Redrive = %+v, want 5 changed", res)
	}
	if !slices.Equal(progress, []int64{2, 4, 5}) {
		t.Fatalf("progress %v, want [2 4 5]", progress)
	}
	for _, id := range failedA {
		r := getState(t, db, id)
		if r.Status != queue.Pending || r.Stage != "a" || r.Attempts != 0 || r.Timeout != nil || r.Error != nil || r.DispatchError != nil {
			t.Fatalf("redriven row %d = %+v", id, r)
		}
		if time.Since(r.UpdatedAt) > time.Minute {
			t.Fatalf("redriven row %d keeps its old updated_at %v", id, r.UpdatedAt)
		}
	}
	for _, ids := range [][]int64{failedB, doneA, runA} {
		want := getState(t, db, ids[0]).Status
		for _, st := range statuses(t, db, ids) {
			if st != want || st == queue.Pending {
				t.Fatalf("rows %v touched: %v", ids, statuses(t, db, ids))
			}
		}
	}
	// Each batch wakes the dispatcher.
	if n := waitNotification(t, conn, 10*time.Second); n.Channel != "pepsi_ingress" {
		t.Fatalf("notification on %q", n.Channel)
	}

	// To another stage; nothing left to do is not an error.
	res, err = db.Redrive(ctx, admin.RedriveParams{Status: queue.Failed, ToStage: "c"})
	if err != nil || res.Changed != 2 {
		t.Fatalf("Redrive to c = %+v, %v", res, err)
	}
	for _, id := range failedB {
		if r := getState(t, db, id); r.Stage != "c" || r.Status != queue.Pending {
			t.Fatalf("row %d = %+v, want pending at c", id, r)
		}
	}
	if res, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Failed}); err != nil || res.Changed != 0 {
		t.Fatalf("Redrive with no failed rows = %+v, %v", res, err)
	}
	if _, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Pending}); err == nil {
		t.Fatal("Redrive of pending rows: no error")
	}
}

func TestRedriveRunning(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	run := seed(t, db, "a", queue.Running, 3)

	l := holdLock(t, dsn)
	res, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Running})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 0 || res.Held != 3 || res.Holder == nil || res.Holder.PID != l.pid {
		t.Fatalf("Redrive of running rows with a dispatcher = %+v", res)
	}
	if st := statuses(t, db, run); slices.ContainsFunc(st, func(s queue.Status) bool { return s != queue.Running }) {
		t.Fatalf("held rows touched: %v", st)
	}

	// Without a dispatcher they are orphans, and may be redriven.
	l.release(t)
	res, err = db.Redrive(ctx, admin.RedriveParams{Status: queue.Running})
	if err != nil || res != (admin.Repair{Changed: 3}) {
		t.Fatalf("Redrive of orphans = %+v, %v", res, err)
	}
}

func TestRedriveIDs(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	failed := seed(t, db, "a", queue.Failed, 2)
	paused := seed1(t, db, "a", queue.Paused)
	done := seed1(t, db, "b", queue.Done)
	pending := seed1(t, db, "a", queue.Pending)
	running := seed1(t, db, "a", queue.Running)
	dirty(t, db, []int64{failed[0], paused, done})
	before := getState(t, db, failed[1])

	// A missing id: nothing changes.
	_, err := db.Redrive(ctx, admin.RedriveParams{IDs: []int64{failed[0], 1 << 40, (1 << 40) + 1}})
	var nf *admin.NotFoundError
	if !errors.As(err, &nf) || nf.ID != 1<<40 || nf.More != 1 || !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("Redrive with missing ids: %v", err)
	}
	if err.Error() != "no such message: 1099511627776 (and 1 more of the ids given)" {
		t.Fatalf("error text %q", err)
	}
	if r := getState(t, db, failed[0]); r.Status != queue.Failed {
		t.Fatalf("row changed although an id was missing: %+v", r)
	}

	// With a dispatcher: the running row is held, the pending one left alone.
	l := lockAsDispatcher(t, dsn)
	ids := []int64{failed[0], paused, done, pending, running, failed[0]}
	res, err := db.Redrive(ctx, admin.RedriveParams{IDs: ids, ToStage: "z"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != 3 || res.Held != 1 || res.Pending != 1 || res.Holder == nil || res.Holder.PID != int32(l.PID()) {
		t.Fatalf("Redrive by id = %+v", res)
	}
	for _, id := range []int64{failed[0], paused, done} {
		if r := getState(t, db, id); r.Status != queue.Pending || r.Stage != "z" || r.Attempts != 0 || r.Timeout != nil || r.Error != nil || r.DispatchError != nil {
			t.Fatalf("row %d = %+v", id, r)
		}
	}
	if r := getState(t, db, pending); r.Stage != "a" {
		t.Fatalf("pending row moved: %+v", r)
	}
	if r := getState(t, db, running); r.Status != queue.Running || r.Stage != "a" {
		t.Fatalf("held row touched: %+v", r)
	}
	if r := getState(t, db, failed[1]); !r.same(before) {
		t.Fatalf("row not asked for changed: %+v", r)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	oldDone := seed(t, db, "a", queue.Done, 7)
	seed(t, db, "a", queue.Done, 2) // too young
	oldDoneB := seed(t, db, "b", queue.Done, 2)
	failed := seed(t, db, "a", queue.Failed, 2)
	exec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '3 days' WHERE id = ANY($1)", slices.Concat(oldDone, oldDoneB, failed))

	p := admin.PurgeParams{Status: queue.Done, Stage: "a", OlderThan: 48 * time.Hour, Batch: 3}
	dry := p
	dry.DryRun = true
	if res, err := db.Purge(ctx, dry); err != nil || res != (admin.Repair{Changed: 7}) {
		t.Fatalf("dry run = %+v, %v", res, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message"); n != 13 {
		t.Fatalf("dry run deleted: %d messages left", n)
	}

	var progress []int64
	p.Progress = func(n int64) { progress = append(progress, n) }
	res, err := db.Purge(ctx, p)
	if err != nil || res != (admin.Repair{Changed: 7}) {
		t.Fatalf("Purge = %+v, %v", res, err)
	}
	if !slices.Equal(progress, []int64{3, 6, 7}) {
		t.Fatalf("progress %v", progress)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE id = ANY($1)", oldDone); n != 0 {
		t.Fatalf("%d purged messages remain", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", oldDone); n != 0 {
		t.Fatalf("%d purged state rows remain", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state"); n != 6 {
		t.Fatalf("%d rows remain, want 6", n)
	}

	// Every stage, no age.
	if res, err := db.Purge(ctx, admin.PurgeParams{Status: queue.Done}); err != nil || res.Changed != 4 {
		t.Fatalf("Purge done = %+v, %v", res, err)
	}
	if res, err := db.Purge(ctx, admin.PurgeParams{Status: "bogus"}); err == nil {
		t.Fatalf("Purge of an unknown status = %+v", res)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'failed'"); n != 2 {
		t.Fatalf("failed rows touched: %d left", n)
	}
}

func TestPurgeRunning(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	run := seed(t, db, "a", queue.Running, 5)

	// A dispatcher holds them: dry run and purge both leave them.
	l := holdLock(t, dsn)
	for _, dry := range []bool{true, false} {
		res, err := db.Purge(ctx, admin.PurgeParams{Status: queue.Running, DryRun: dry})
		if err != nil || res.Changed != 0 || res.Held != 5 || res.Holder == nil || res.Holder.PID != l.pid {
			t.Fatalf("Purge (dry run %v) with a dispatcher = %+v, %v", dry, res, err)
		}
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state"); n != 5 {
		t.Fatalf("held rows deleted: %d left", n)
	}
	l.release(t)

	// A dispatcher that starts half-way: the batches after it leave the
	// running rows alone.
	var l2 *queue.Listener
	res, err := db.Purge(ctx, admin.PurgeParams{Status: queue.Running, Batch: 2, Progress: func(n int64) {
		if l2 == nil {
			l2 = lockAsDispatcher(t, dsn)
		}
	}})
	if err != nil || res.Changed != 2 || res.Held != 3 || res.Holder == nil || res.Holder.PID != int32(l2.PID()) {
		t.Fatalf("Purge with a dispatcher starting = %+v, %v", res, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", run[2:]); n != 3 {
		t.Fatalf("rows after the dispatcher started deleted: %d of 3 left", n)
	}
}

// TestRedriveRunningPerStage: running rows at a stage a dispatcher owns
// are left alone; those at a stage nobody owns are orphans and redriven.
func TestRedriveRunningPerStage(t *testing.T) {
	db, dsn, ctx := newDB(t)
	owned := seed(t, db, "a", queue.Running, 3)
	orphans := seed(t, db, "b", queue.Running, 2)
	l := dial(t, dsn, "c")
	if err := l.TakeStages(ctx, []string{"a"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	res, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Running})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed != int64(len(orphans)) || res.Held != int64(len(owned)) || res.Holder == nil || res.Holder.PID != int32(l.PID()) {
		t.Errorf("Redrive running = %+v, want %d changed, %d held by server pid %d", res, len(orphans), len(owned), l.PID())
	}
	// A dry run of a purge counts the same.
	res, err = db.Purge(ctx, admin.PurgeParams{Status: queue.Running, DryRun: true})
	if err != nil || res.Changed != 0 || res.Held != int64(len(owned)) || res.Holder == nil || res.Holder.PID != int32(l.PID()) {
		t.Errorf("Purge running, dry run = %+v, %v; want 0 to purge, %d held by server pid %d", res, err, len(owned), l.PID())
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'running' AND stage = 'a'"); n != int64(len(owned)) {
		t.Errorf("%d running rows left at the owned stage, want %d", n, len(owned))
	}
	// By id too.
	res, err = db.Redrive(ctx, admin.RedriveParams{IDs: owned})
	if err != nil || res.Changed != 0 || res.Held != int64(len(owned)) || res.Holder == nil || res.Holder.PID != int32(l.PID()) {
		t.Errorf("Redrive by id of owned running rows = %+v, %v", res, err)
	}
}

// TestRedriveHandedRunning: a running row belongs to the owner of the
// stage it was handed out at, even once its stage program advanced it
// into another set's stage: a redrive of that stage's running rows leaves
// it to its owner.
func TestRedriveHandedRunning(t *testing.T) {
	db, dsn, ctx := newDB(t)
	id := seed1(t, db, "a", queue.Pending)
	claimed, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 1}}, nil)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	exec(t, db, "UPDATE pepsi.state SET stage = 'b' WHERE id = $1", id) // running at b now, handed out at a (moved by hand: pepsi.advance requeues)
	l := dial(t, dsn, "c")
	if err := l.TakeStages(ctx, []string{"a"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	res, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Running, Stage: "b"})
	if err != nil || res.Changed != 0 || res.Held != 1 || res.Holder == nil || res.Holder.PID != int32(l.PID()) {
		t.Errorf("Redrive of the row at b while a is owned = %+v, %v; want it held by a's owner", res, err)
	}
	if st := getState(t, db, id); st.Status != queue.Running || st.Stage != "b" {
		t.Errorf("after the redrive: %+v, want running at b", st)
	}
}

// TestRedrivePriorityKey: retry gives a new priority when asked and keeps
// it otherwise; a finished message whose key another unfinished message
// holds comes back without its key, so one unfinished message per key
// holds.
func TestRedrivePriorityKey(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	a, _, err := db.Store.EnqueueKeyed(ctx, queue.Keyed{Stage: "a", Key: "k", Priority: 4})
	if err != nil {
		t.Fatal(err)
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'failed' WHERE id = $1", a)
	b, _, err := db.Store.EnqueueKeyed(ctx, queue.Keyed{Stage: "a", Key: "k"})
	if err != nil || b == a {
		t.Fatalf("key k after failure: %d (first %d), %v", b, a, err)
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", b)
	c, _, err := db.Store.EnqueueKeyed(ctx, queue.Keyed{Stage: "a", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	// a and b back to pending while c holds k: both lose the key.
	if _, err := db.Redrive(ctx, admin.RedriveParams{IDs: []int64{a, b}}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id IN ($1, $2) AND dedup_key IS NULL AND status = 'pending'", a, b); n != 2 {
		t.Errorf("%d of the redriven messages pending without their key, want 2", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = $1 AND priority = 4", a); n != 1 {
		t.Error("redrive without a priority changed it")
	}
	// Two finished with one key, redriven together: the lower id keeps it.
	exec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", c)
	d, _, err := db.Store.EnqueueKeyed(ctx, queue.Keyed{Stage: "a", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'failed' WHERE id = $1", d)
	p := int32(-7)
	res, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Failed, Priority: &p})
	if err != nil || res.Changed != 1 {
		t.Fatalf("Redrive failed: %+v, %v", res, err)
	}
	res, err = db.Redrive(ctx, admin.RedriveParams{IDs: []int64{c}})
	if err != nil || res.Changed != 1 {
		t.Fatalf("Redrive done: %+v, %v", res, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = $1 AND dedup_key = 'k' AND priority = -7", d); n != 1 {
		t.Error("the failed message redriven with --priority -7 lost its key or did not get the priority")
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = $1 AND dedup_key IS NULL", c); n != 1 {
		t.Error("a redriven message kept a key an unfinished message holds")
	}
}

// TestRedriveFlowKey: a message redriven to a stage with KEY gets its key
// there, as every way a message becomes pending at a stage gives it
// (pkg/queue's TestClaimKeyed).
func TestRedriveFlowKey(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	if _, _, err := db.Store.SetFlowKeys(ctx, []string{"k", "plain"}, []queue.FlowKey{{Stage: "plain", Header: "customer", Limit: 3}}); err != nil {
		t.Fatal(err)
	}
	ids, err := db.Store.EnqueueBulk(ctx, queue.Bulk{Stage: "k", Headers: map[string]string{"customer": "c"}, Payloads: make([][]byte, 1)})
	if err != nil {
		t.Fatal(err)
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", ids[0])
	if _, err := db.Redrive(ctx, admin.RedriveParams{IDs: ids, Status: queue.Done, ToStage: "plain"}); err != nil {
		t.Fatal(err)
	}
	c, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "plain", Cap: 10, KeyLimit: 3}}, nil)
	if err != nil || len(c) != 1 || c[0].ID != ids[0] || !c[0].Keyed || c[0].Key != "c" {
		t.Fatalf("claim at plain after the redrive: %+v, %v; want message %d with key c", c, err, ids[0])
	}
}
