package admin_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// readHealth reads the health model with hc, failing the test on an error.
func readHealth(t *testing.T, db *testDB, hc admin.HealthConfig) *admin.Health {
	t.Helper()
	h, err := db.Health(testCtx(t), hc)
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	return h
}

// seeded is n messages of a stage in a status.
type seeded struct {
	stage  string
	status queue.Status
	n      int
}

// seedEach seeds each.
func seedEach(t *testing.T, db *testDB, each ...seeded) {
	t.Helper()
	for _, x := range each {
		seed(t, db, x.stage, x.status, x.n)
	}
}

// TestHealthOwners: the stages that need a dispatcher are the configured
// ones or, with none configured, those with messages waiting (pending,
// paused, held; not failed nor running); those no dispatcher owns are
// unowned, whether or not one runs; a dispatcher with a stage set owns its
// stages only.
func TestHealthOwners(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	seedEach(t, db, seeded{"c", queue.Pending, 2}, seeded{"d", queue.Held, 1}, seeded{"e", queue.Failed, 1}, seeded{"f", queue.Running, 1})
	configured := admin.HealthConfig{Stages: []string{"b", "a"}}

	h := readHealth(t, db, configured)
	if h.DispatcherRuns() || !slices.Equal(h.NeedOwner(), []string{"b", "a"}) || !slices.Equal(h.Unowned(), []string{"b", "a"}) {
		t.Errorf("no dispatcher: runs %v, need %v, unowned %v", h.DispatcherRuns(), h.NeedOwner(), h.Unowned())
	}
	if got := h.Stages(); !slices.Equal(got, []string{"b", "a", "c", "d", "f"}) {
		t.Errorf("stages %v, want the configured, then those with unfinished messages by name", got)
	}
	h = readHealth(t, db, admin.HealthConfig{})
	if !slices.Equal(h.NeedOwner(), []string{"c", "d"}) || !slices.Equal(h.Unowned(), []string{"c", "d"}) {
		t.Errorf("unconfigured: need %v, unowned %v", h.NeedOwner(), h.Unowned())
	}

	l := dial(t, dsn, "c")
	if err := l.TakeStages(ctx, []string{"a", "c"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	h = readHealth(t, db, configured)
	if !h.DispatcherRuns() || !slices.Equal(h.Unowned(), []string{"b"}) || h.Owner("a") == nil || h.Owner("a").ServerPID != int32(l.PID()) {
		t.Errorf("a set's dispatcher: runs %v, unowned %v, a's owner %+v", h.DispatcherRuns(), h.Unowned(), h.Owner("a"))
	}
	h = readHealth(t, db, admin.HealthConfig{})
	if !slices.Equal(h.Unowned(), []string{"d"}) {
		t.Errorf("unconfigured, c owned: unowned %v", h.Unowned())
	}
}

// TestHealthAllStages: a dispatcher without a stage set owns every stage.
func TestHealthAllStages(t *testing.T) {
	t.Parallel()
	db, dsn, _ := newDB(t)
	seed(t, db, "x", queue.Pending, 1)
	lockAsDispatcher(t, dsn)
	h := readHealth(t, db, admin.HealthConfig{Stages: []string{"a"}})
	if !h.DispatcherRuns() || len(h.Unowned()) != 0 || h.Dispatchers.Holder == nil || h.Owner("x") != h.Dispatchers.Holder {
		t.Errorf("runs %v, unowned %v, holder %+v", h.DispatcherRuns(), h.Unowned(), h.Dispatchers.Holder)
	}
}

// TestHealthUnconfigured: while stages are configured, a stage with
// messages waiting (pending, paused, held; enqueued and not admitted
// too) that none of them is, by name; running, failed and cancelled
// messages wait for no worker. Without configured stages, none is.
func TestHealthUnconfigured(t *testing.T) {
	t.Parallel()
	db, _, _ := newDB(t)
	seedEach(t, db, seeded{"a", queue.Pending, 3}, seeded{"y", queue.Held, 1}, seeded{"x", queue.Pending, 2}, seeded{"x", queue.Paused, 1},
		seeded{"r", queue.Running, 1}, seeded{"f", queue.Failed, 1}, seeded{"k", queue.Cancelled, 1})
	exec(t, db, "SELECT pepsi.enqueue('x', 'q', '{}')")
	h := readHealth(t, db, admin.HealthConfig{Stages: []string{"a"}})
	if got, want := h.Unconfigured(), []admin.StageMessages{{Stage: "x", N: 4}, {Stage: "y", N: 1}}; !slices.Equal(got, want) {
		t.Errorf("unconfigured %+v, want %+v", got, want)
	}
	if got := readHealth(t, db, admin.HealthConfig{}).Unconfigured(); len(got) != 0 {
		t.Errorf("with no stage configured: %+v", got)
	}
}

// TestHealthOrphans: running messages count at the stage they were
// handed out at, and are orphans while no dispatcher owns that stage.
func TestHealthOrphans(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	ids := seed(t, db, "a", queue.Running, 3)
	exec(t, db, "UPDATE pepsi.state SET handed = 'b' WHERE id = $1", ids[0]) // advanced from b into a
	h := readHealth(t, db, admin.HealthConfig{Stages: []string{"a", "b"}})
	if got := h.Orphans(); len(got) != 2 || got["a"] != 2 || got["b"] != 1 {
		t.Errorf("orphans %v", got)
	}
	l := dial(t, dsn, "c")
	if err := l.TakeStages(ctx, []string{"b"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	h = readHealth(t, db, admin.HealthConfig{Stages: []string{"a", "b"}})
	if got := h.Orphans(); len(got) != 1 || got["a"] != 2 {
		t.Errorf("b owned: orphans %v", got)
	}
}

// TestHealthPaused: a paused stage is paused until resumed.
func TestHealthPaused(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	if _, _, err := db.PauseStage(ctx, "a", "ops", "deploy"); err != nil {
		t.Fatal(err)
	}
	h := readHealth(t, db, admin.HealthConfig{Stages: []string{"a", "b"}})
	if !h.StagePaused("a") || h.StagePaused("b") || len(h.Paused) != 1 || h.Paused[0].Reason != "deploy" {
		t.Errorf("paused %+v", h.Paused)
	}
	exec(t, db, "DELETE FROM pepsi.paused_stages")
	if h := readHealth(t, db, admin.HealthConfig{}); h.StagePaused("a") || len(h.Paused) != 0 {
		t.Errorf("resumed: paused %+v", h.Paused)
	}
}

// TestHealthNotRun: a stage whose recent answers were mostly 75 within
// two STATS_INTERVALs; not one that answered 75 now and then, nor one
// whose statistics are older.
func TestHealthNotRun(t *testing.T) {
	t.Parallel()
	db, _, _ := newDB(t)
	hc := admin.HealthConfig{StatsInterval: time.Minute}
	exec(t, db, `INSERT INTO pepsi.stage_stats (stage, not_run, recent_not_run, recent_passes, processed) VALUES ('a', 7, 7, 1, 1), ('b', 1, 1, 30, 30)`)
	if got := readHealth(t, db, hc).NotRun; len(got) != 1 || got[0].Stage != "a" || got[0].NotRun != 7 || got[0].Passes != 1 {
		t.Errorf("not run %+v", got)
	}
	exec(t, db, `UPDATE pepsi.stage_stats SET updated_at = now() - interval '3 minutes'`)
	if got := readHealth(t, db, hc).NotRun; len(got) != 0 {
		t.Errorf("old statistics: not run %+v", got)
	}
}

// TestHealthBacklog: what waits in pepsi.ingress is fine until it is
// older than 2 × POLL_INTERVAL (and a second), then warns, and fails past
// 10 × POLL_INTERVAL.
func TestHealthBacklog(t *testing.T) {
	t.Parallel()
	db, _, _ := newDB(t)
	hc := admin.HealthConfig{PollInterval: 2 * time.Second}
	if h := readHealth(t, db, hc); h.BacklogStatus() != admin.StatusOK || h.BacklogAge() != 0 || h.Backlog.Rows != 0 {
		t.Errorf("empty: %s, %v, %+v", h.BacklogStatus(), h.BacklogAge(), h.Backlog)
	}
	exec(t, db, "SELECT pepsi.enqueue('a', 'x', '{}') FROM generate_series(1, 2)")
	for _, c := range []struct {
		age  string
		want string
	}{{"1 second", admin.StatusOK}, {"10 seconds", admin.StatusWarn}, {"1 hour", admin.StatusFail}} {
		exec(t, db, "UPDATE pepsi.ingress SET created_at = now() - $1::interval", c.age)
		h := readHealth(t, db, hc)
		if h.BacklogStatus() != c.want || h.Backlog.Rows != 2 || h.BacklogAge() < time.Second {
			t.Errorf("oldest %s ago: %s (age %v, %d rows), want %s", c.age, h.BacklogStatus(), h.BacklogAge(), h.Backlog.Rows, c.want)
		}
	}
}

// TestHealthWake: the wake flag never set while no dispatcher runs, and
// an armed set no running dispatcher owns, are wrong; a dispatcher of
// every stage owns every set.
func TestHealthWake(t *testing.T) {
	t.Parallel()
	db, dsn, _ := newDB(t)
	exec(t, db, "ALTER SEQUENCE pepsi.wake_armed RESTART") // as a server crash leaves the unlogged flag
	h := readHealth(t, db, admin.HealthConfig{})
	if !h.WakeNeverSet() || len(h.StaleWake()) != 0 {
		t.Errorf("after a crash: never set %v, stale %v", h.WakeNeverSet(), h.StaleWake())
	}
	exec(t, db, "SELECT pepsi.arm('*', true), pepsi.arm('p,q', true), pepsi.arm('r', false)")
	h = readHealth(t, db, admin.HealthConfig{})
	if h.WakeNeverSet() || !slices.Equal(h.StaleWake(), []string{"*", "p,q"}) {
		t.Errorf("armed, no dispatcher: never set %v, stale %v", h.WakeNeverSet(), h.StaleWake())
	}
	set := dial(t, dsn, "c")
	if err := set.TakeStages(testCtx(t), []string{"p", "q"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	h = readHealth(t, db, admin.HealthConfig{})
	if !slices.Equal(h.StaleWake(), []string{"*"}) {
		t.Errorf("p,q's dispatcher runs: stale %v, want *", h.StaleWake())
	}
	set.Close(testCtx(t))
	all := dial(t, dsn, "c") // owns every stage, p and q too, once the set's locks are gone
	testkit.Wait(t, "the database-wide lock", 30*time.Second, func() bool {
		_, err := all.TryLock(testCtx(t))
		return err == nil
	})
	h = readHealth(t, db, admin.HealthConfig{})
	if len(h.StaleWake()) != 0 {
		t.Errorf("a dispatcher of every stage: stale %v", h.StaleWake())
	}
}

// TestHealthJanitor: dispatchers that run with none holding the janitor
// lock leave retention, the vacuum check and the schedules undone.
func TestHealthJanitor(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	if h := readHealth(t, db, admin.HealthConfig{}); h.NoJanitor() || h.Janitor != nil {
		t.Errorf("no dispatcher: no janitor %v, %+v", h.NoJanitor(), h.Janitor)
	}
	l := lockAsDispatcher(t, dsn)
	if h := readHealth(t, db, admin.HealthConfig{}); !h.NoJanitor() {
		t.Error("a dispatcher without the janitor lock: NoJanitor is false")
	}
	if ok, err := l.TryJanitor(ctx); err != nil || !ok {
		t.Fatalf("TryJanitor: %v, %v", ok, err)
	}
	if h := readHealth(t, db, admin.HealthConfig{}); h.NoJanitor() || h.Janitor == nil || h.Janitor.PID != int32(l.PID()) {
		t.Errorf("the janitor: no janitor %v, %+v", h.NoJanitor(), h.Janitor)
	}
}

// TestHealthSchedules: each configured schedule, in the configuration's
// order: one no dispatcher has seen, one whose last slot was enqueued,
// one skipped (its message refused), and one whose slot is overdue; a
// slot is not overdue before ScheduleLate has passed, nor one older than
// the schedule's row.
func TestHealthSchedules(t *testing.T) {
	t.Parallel()
	db, _, _ := newDB(t)
	cfg, err := config.Parse("t.conf", []byte("[stage-a]\nPROGRAM = a\n[schedule-unseen]\nEVERY = 1h\nSTAGE = a\n"+
		"[schedule-ok]\nEVERY = 1h\nSTAGE = a\n"+
		"[schedule-skip]\nEVERY = 1h\nSTAGE = a\n"+
		"[schedule-late]\nCRON = 30 2 * * *\nSTAGE = a\n"+
		"[schedule-new]\nCRON = 30 2 * * *\nSTAGE = a\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	hour := now.Truncate(time.Hour)
	exec(t, db, "INSERT INTO pepsi.schedule (name, since, last_slot, last_id, last_at) VALUES ('ok', $1, $2, 42, $2), ('skip', $1, $2, NULL, $2)", now.Add(-48*time.Hour), hour)
	exec(t, db, "INSERT INTO pepsi.schedule (name, since) VALUES ('late', $1), ('new', now())", now.Add(-7*24*time.Hour))
	h := readHealth(t, db, admin.HealthConfigOf(cfg))
	states := h.ScheduleStates()
	var got []string
	for _, s := range states {
		got = append(got, fmt.Sprintf("%s seen=%v skipped=%v overdue=%v next=%v", s.Schedule.Name, s.Seen, s.Skipped(), !s.Overdue.IsZero(), !s.Next.IsZero()))
	}
	want := []string{
		"unseen seen=false skipped=false overdue=false next=true",
		"ok seen=true skipped=false overdue=false next=true",
		"skip seen=true skipped=true overdue=false next=true",
		"late seen=true skipped=false overdue=true next=true",
		"new seen=true skipped=false overdue=false next=true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("schedules:\n%v\nwant\n%v", got, want)
	}
	if ok := states[1]; ok.Run.LastID == nil || *ok.Run.LastID != 42 || !ok.Next.Equal(hour.Add(time.Hour)) {
		t.Errorf("ok: %+v", ok)
	}
	if late := states[3]; late.Overdue.After(h.Now) || h.Now.Sub(late.Overdue) > 24*time.Hour+admin.ScheduleLate {
		t.Errorf("late's overdue slot %v, now %v", late.Overdue, h.Now)
	}
}
