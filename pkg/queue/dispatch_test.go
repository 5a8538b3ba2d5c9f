package queue_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// settle applies verdicts as the settle lane does: a turn of settles only.
// settle settles vs, each of its row's current pass when its Pass is 0
// (the tests that are not about the token).
func settle(ctx context.Context, db *pgtest.DB, vs []queue.Settle) ([]queue.Settled, error) {
	for i := range vs {
		if vs[i].Pass == 0 {
			if err := db.Pool.QueryRow(ctx, "SELECT coalesce(max(pass), 0) FROM pepsi.state WHERE id = $1", vs[i].ID).Scan(&vs[i].Pass); err != nil {
				return nil, err
			}
		}
	}
	return settlePasses(ctx, db, vs)
}

// settlePasses settles vs as they are.
func settlePasses(ctx context.Context, db *pgtest.DB, vs []queue.Settle) ([]queue.Settled, error) {
	var res queue.TurnResult
	err := db.RunTurn(ctx, queue.Turn{Settles: vs}, &res)
	return res.Settled, err
}

func claimedIDs(cs []queue.Claimed, stage string) []int64 {
	var ids []int64
	for _, c := range cs {
		if c.Stage == stage {
			ids = append(ids, c.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestClaim(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	// Interleave stages and statuses so that ingress order matters.
	var aPending, bPending, cPending, others []int64
	others = append(others, seed(t, db, "a", queue.Done, 1)...)
	aPending = append(aPending, seed(t, db, "a", queue.Pending, 2)...)
	bPending = append(bPending, seed(t, db, "b", queue.Pending, 1)...)
	others = append(others, seed(t, db, "a", queue.Running, 1)...)
	aPending = append(aPending, seed(t, db, "a", queue.Pending, 2)...)
	others = append(others, seed(t, db, "a", queue.Paused, 1)...)
	others = append(others, seed(t, db, "a", queue.Failed, 1)...)
	bPending = append(bPending, seed(t, db, "b", queue.Pending, 1)...)
	cPending = append(cPending, seed(t, db, "c", queue.Pending, 3)...)
	aPending = append(aPending, seed(t, db, "a", queue.Pending, 1)...)
	othersBefore := map[int64]stateRow{}
	for _, id := range others {
		othersBefore[id] = getState(t, db, id)
	}

	dst := []queue.Claimed{{ID: -1, Stage: "kept"}}
	got, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 3}, {Stage: "b", Cap: 5}, {Stage: "c", Cap: 0}, {Stage: "nothing", Cap: 4}}, dst)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if len(got) == 0 || got[0] != dst[0] {
		t.Fatalf("Claim did not append to dst: %v", got)
	}
	got = got[1:]
	if ids := claimedIDs(got, "a"); !slices.Equal(ids, aPending[:3]) {
		t.Fatalf("a: claimed %v, want the first three pending %v", ids, aPending[:3])
	}
	if ids := claimedIDs(got, "b"); !slices.Equal(ids, bPending) {
		t.Fatalf("b: claimed %v, want all pending %v", ids, bPending)
	}
	if len(got) != 3+len(bPending) {
		t.Fatalf("claimed %v: stages with cap 0 or without rows must give nothing", got)
	}
	for _, c := range got {
		if r := getState(t, db, c.ID); r.Status != queue.Running || r.Attempts != 1 || r.Stage != c.Stage {
			t.Fatalf("claimed row %d: %+v, want running with 1 attempt", c.ID, r)
		}
	}
	for _, id := range cPending {
		if r := getState(t, db, id); r.Status != queue.Pending || r.Attempts != 0 {
			t.Fatalf("c row %d (cap 0) claimed: %+v", id, r)
		}
	}
	for _, id := range aPending[3:] {
		if r := getState(t, db, id); r.Status != queue.Pending {
			t.Fatalf("a row %d beyond the cap claimed: %+v", id, r)
		}
	}
	for id, before := range othersBefore {
		if after := getState(t, db, id); !after.same(before) {
			t.Fatalf("non-pending row %d touched: %+v → %+v", id, before, after)
		}
	}

	// The next claim takes the next ones.
	got, err = queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 3}, {Stage: "b", Cap: 1}, {Stage: "c", Cap: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ids := claimedIDs(got, "a"); !slices.Equal(ids, aPending[3:]) {
		t.Fatalf("second claim a: %v, want %v", ids, aPending[3:])
	}
	if ids := claimedIDs(got, "c"); !slices.Equal(ids, cPending[:2]) {
		t.Fatalf("second claim c: %v, want %v", ids, cPending[:2])
	}
	if ids := claimedIDs(got, "b"); len(ids) != 0 {
		t.Fatalf("second claim b: %v, want none left", ids)
	}

	// A row put back (as the orphan sweep does) is claimed again, with a
	// second attempt, before later ones.
	exec(t, db, "UPDATE pepsi.state SET status = 'pending', updated_at = now() WHERE id = $1", aPending[0])
	got, err = queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 1}}, nil)
	if err != nil || len(got) != 1 || got[0].ID != aPending[0] {
		t.Fatalf("reclaim: %v, %v; want %d", got, err, aPending[0])
	}
	if r := getState(t, db, aPending[0]); r.Attempts != 2 || r.Status != queue.Running {
		t.Fatalf("reclaimed row: %+v, want running with 2 attempts", r)
	}

	// Nothing to claim, or no capacity: no rows, no error.
	got, err = queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 5}, {Stage: "b", Cap: 5}}, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("claim with nothing pending: %v, %v", got, err)
	}
	got, err = queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "c", Cap: 0}}, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("claim with no capacity: %v, %v", got, err)
	}
	got, err = queue.Claim(ctx, db.Pool, nil, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("claim with no stages: %v, %v", got, err)
	}
}

// Caps are honoured exactly on a larger set.
func TestClaimCapsExact(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	xs := seed(t, db, "x", queue.Pending, 200)
	ys := seed(t, db, "y", queue.Pending, 50)
	for _, caps := range [][2]int{{7, 49}, {1, 1}, {100, 0}, {92, 10}} {
		got, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "x", Cap: caps[0]}, {Stage: "y", Cap: caps[1]}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantX, wantY := xs[:min(caps[0], len(xs))], ys[:min(caps[1], len(ys))]
		xs, ys = xs[len(wantX):], ys[len(wantY):]
		if ids := claimedIDs(got, "x"); !slices.Equal(ids, wantX) {
			t.Fatalf("caps %v: x claimed %d rows %v, want %v", caps, len(ids), ids, wantX)
		}
		if ids := claimedIDs(got, "y"); !slices.Equal(ids, wantY) {
			t.Fatalf("caps %v: y claimed %d rows %v, want %v", caps, len(ids), ids, wantY)
		}
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'running'"); n != 250 {
		t.Fatalf("%d running rows, want 250", n)
	}
}

func TestSettle(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	type tc struct {
		name    string
		stage   func(id int64) // what the stage did to the running row
		verdict queue.Verdict
		reason  string
		// want
		before   queue.Status // status Settle found
		beforeAt string       // stage Settle found
		set      queue.Status
		status   queue.Status
		at       string
		dispErr  string
		errText  string
	}
	// advance requeues the row itself; moved leaves it running at another
	// stage, as a stage that updates the row by hand does.
	advance := func(id int64) { exec(t, db, "SELECT pepsi.advance($1, 'next')", id) }
	moved := func(id int64) { exec(t, db, "UPDATE pepsi.state SET stage = 'next' WHERE id = $1", id) }
	finish := func(id int64) { exec(t, db, "SELECT pepsi.finish($1)", id) }
	pause := func(id int64) { exec(t, db, "SELECT pepsi.pause($1, '1 hour')", id) }
	fail := func(id int64) { exec(t, db, "SELECT pepsi.fail($1, 'stage says no')", id) }
	nothing := func(int64) {}
	const none = "<nil>"
	cases := []tc{
		{"ok advanced", advance, queue.PassOK, "", queue.Pending, "next", "", queue.Pending, "next", none, none},
		{"ok moved", moved, queue.PassOK, "", queue.Running, "next", queue.Pending, queue.Pending, "next", none, none},
		{"ok not moved", nothing, queue.PassOK, "", queue.Running, "s", queue.Failed, queue.Failed, "s", queue.NotMoved, none},
		{"fail same stage", nothing, queue.PassFailed, "boom", queue.Running, "s", queue.Failed, queue.Failed, "s", "boom", none},
		{"fail advanced", advance, queue.PassFailed, "boom", queue.Pending, "next", "", queue.Pending, "next", none, none},
		{"fail moved", moved, queue.PassFailed, "boom", queue.Running, "next", queue.Pending, queue.Pending, "next", none, none},
		{"fail finished", finish, queue.PassFailed, "boom", queue.Done, "s", "", queue.Done, "s", none, none},
		{"fail paused", pause, queue.PassFailed, "boom", queue.Paused, "s", "", queue.Paused, "s", none, none},
		{"fail failed", fail, queue.PassFailed, "boom", queue.Failed, "s", "", queue.Failed, "s", none, "stage says no"},
		{"ok finished", finish, queue.PassOK, "", queue.Done, "s", "", queue.Done, "s", none, none},
		{"ok paused", pause, queue.PassOK, "", queue.Paused, "s", "", queue.Paused, "s", none, none},
		{"ok failed", fail, queue.PassOK, "", queue.Failed, "s", "", queue.Failed, "s", none, "stage says no"},
		{"requeue same stage", nothing, queue.NotRun, "", queue.Running, "s", queue.Pending, queue.Pending, "s", none, none},
		{"requeue advanced", advance, queue.NotRun, "", queue.Pending, "next", "", queue.Pending, "next", none, none},
		{"requeue moved", moved, queue.NotRun, "", queue.Running, "next", queue.Pending, queue.Pending, "next", none, none},
		{"requeue finished", finish, queue.NotRun, "", queue.Done, "s", "", queue.Done, "s", none, none},
		// A stage's answer 75 gives its reason: the message says why it was not run.
		{"not run with a reason", nothing, queue.NotRun, "answered 75", queue.Running, "s", queue.Pending, queue.Pending, "s", "answered 75", none},
		{"not run with a reason, advanced", advance, queue.NotRun, "answered 75", queue.Pending, "next", "", queue.Pending, "next", none, none},
		{"not run with a reason, moved", moved, queue.NotRun, "answered 75", queue.Running, "next", queue.Pending, queue.Pending, "next", none, none},
	}
	ids := seed(t, db, "s", queue.Running, len(cases))
	var vs []queue.Settle
	for i, c := range cases {
		c.stage(ids[i])
		vs = append(vs, queue.Settle{ID: ids[i], Stage: "s", Verdict: c.verdict, Reason: c.reason})
	}
	// A message that no longer exists is not reported.
	vs = append(vs, queue.Settle{ID: 1 << 40, Stage: "s", Verdict: queue.PassFailed, Reason: "gone"})
	before := map[int64]stateRow{}
	for _, id := range ids {
		before[id] = getState(t, db, id)
	}

	got, err := settle(ctx, db, vs)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if len(got) != len(cases) {
		t.Fatalf("Settle returned %d results for %d existing messages: %+v", len(got), len(cases), got)
	}
	byID := map[int64]queue.Settled{}
	for _, s := range got {
		byID[s.ID] = s
	}
	for i, c := range cases {
		id := ids[i]
		s, ok := byID[id]
		if !ok {
			t.Errorf("%s: no result for %d", c.name, id)
			continue
		}
		after := c.set
		if after == "" {
			after = c.before
		}
		if s.Before != c.before || s.Stage != c.beforeAt || s.After != after || s.Changed() != (c.set != "") {
			t.Errorf("%s: Settled{Before %q, Stage %q, After %q}, want {%q, %q, %q}", c.name, s.Before, s.Stage, s.After, c.before, c.beforeAt, after)
		}
		r := getState(t, db, id)
		if r.Status != c.status || r.Stage != c.at || deref(r.DispatchError) != c.dispErr || deref(r.Error) != c.errText {
			t.Errorf("%s: row %s at %s, dispatch_error %s, error %s; want %s at %s, %s, %s", c.name,
				r.Status, r.Stage, deref(r.DispatchError), deref(r.Error), c.status, c.at, c.dispErr, c.errText)
		}
		if s.Requeued() != (c.status == queue.Pending) {
			t.Errorf("%s: Requeued %v, want %v", c.name, s.Requeued(), c.status == queue.Pending)
		}
		if c.set == "" && !r.same(before[id]) {
			t.Errorf("%s: row left alone changed: %+v → %+v", c.name, before[id], r)
		}
		if r.Attempts != 0 {
			t.Errorf("%s: attempts %d changed by Settle", c.name, r.Attempts)
		}
	}

	// Settling again changes nothing for the settled rows.
	got, err = settle(ctx, db, vs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if s.Changed() {
			t.Fatalf("second Settle changed %+v", s)
		}
	}
	if got, err := settle(ctx, db, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty Settle: %v %v", got, err)
	}
}

// Many verdicts in one call.
func TestSettleMany(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	ids := seed(t, db, "s", queue.Running, 3000)
	var vs []queue.Settle
	for i, id := range ids {
		switch i % 3 {
		case 0:
			vs = append(vs, queue.Settle{ID: id, Stage: "s", Verdict: queue.NotRun})
		case 1:
			vs = append(vs, queue.Settle{ID: id, Stage: "s", Verdict: queue.PassFailed, Reason: "exit 3"})
		case 2:
			exec(t, db, "SELECT pepsi.advance($1, 't')", id)
			vs = append(vs, queue.Settle{ID: id, Stage: "s", Verdict: queue.PassOK})
		}
	}
	got, err := settle(ctx, db, vs)
	if err != nil || len(got) != len(ids) {
		t.Fatalf("Settle: %d results, %v", len(got), err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'pending' AND stage = 's'"); n != 1000 {
		t.Fatalf("requeued: %d", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'failed' AND dispatch_error = 'exit 3'"); n != 1000 {
		t.Fatalf("failed: %d", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'pending' AND stage = 't'"); n != 1000 {
		t.Fatalf("advanced: %d", n)
	}
}

func TestResetRunning(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	running := seed(t, db, "a", queue.Running, 4)
	running = append(running, seed(t, db, "b", queue.Running, 2)...)
	others := map[int64]queue.Status{}
	for _, st := range []queue.Status{queue.Pending, queue.Paused, queue.Done, queue.Failed} {
		for _, id := range seed(t, db, "a", st, 2) {
			others[id] = st
		}
	}
	n, err := db.ResetRunning(ctx)
	if err != nil || n != int64(len(running)) {
		t.Fatalf("ResetRunning = %d, %v; want %d", n, err, len(running))
	}
	for _, id := range running {
		if r := getState(t, db, id); r.Status != queue.Pending {
			t.Fatalf("running row %d now %s", id, r.Status)
		}
	}
	for id, st := range others {
		if r := getState(t, db, id); r.Status != st {
			t.Fatalf("%s row %d now %s", st, id, r.Status)
		}
	}
	if n, err := db.ResetRunning(ctx); err != nil || n != 0 {
		t.Fatalf("second ResetRunning = %d, %v", n, err)
	}
}

func TestResumePaused(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	n, next, err := db.ResumePaused(ctx)
	if err != nil || n != 0 || !next.IsZero() {
		t.Fatalf("ResumePaused with none paused: %d, %v, %v", n, next, err)
	}

	ids := seed(t, db, "a", queue.Paused, 5)
	due1, due2, fut1, fut2, notPaused := ids[0], ids[1], ids[2], ids[3], ids[4]
	exec(t, db, "UPDATE pepsi.state SET timeout = now() - interval '1 minute' WHERE id = $1", due1)
	exec(t, db, "UPDATE pepsi.state SET timeout = now() - interval '1 millisecond' WHERE id = $1", due2)
	exec(t, db, "UPDATE pepsi.state SET timeout = now() + interval '2 hours' WHERE id = $1", fut2)
	exec(t, db, "UPDATE pepsi.state SET timeout = now() + interval '1 hour' WHERE id = $1", fut1)
	exec(t, db, "UPDATE pepsi.state SET status = 'failed', timeout = now() - interval '1 hour' WHERE id = $1", notPaused)
	futTimeout := *getState(t, db, fut1).Timeout

	n, next, err = db.ResumePaused(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("ResumePaused flipped %d, want 2", n)
	}
	if !next.Equal(futTimeout) {
		t.Fatalf("ResumePaused next due %v, want %v", next, futTimeout)
	}
	for _, id := range []int64{due1, due2} {
		if r := getState(t, db, id); r.Status != queue.Pending || r.Timeout != nil {
			t.Fatalf("due row %d: %+v, want pending without timeout", id, r)
		}
	}
	for _, id := range []int64{fut1, fut2} {
		if r := getState(t, db, id); r.Status != queue.Paused {
			t.Fatalf("future row %d: %+v, want still paused", id, r)
		}
	}
	if r := getState(t, db, notPaused); r.Status != queue.Failed {
		t.Fatalf("failed row with an old timeout: %+v", r)
	}
	if n, next, err := db.ResumePaused(ctx); err != nil || n != 0 || !next.Equal(futTimeout) {
		t.Fatalf("second ResumePaused = %d, %v, %v", n, next, err)
	}
	if time.Until(futTimeout) < 50*time.Minute {
		t.Fatalf("future timeout %v is not an hour away", futTimeout)
	}
}

// TestSettlePasses: a verdict acts on its own pass only, and books every
// pass once, however the settle finds the row: the gaps of issue 49, each
// of which the settle of a message and stage (no token) got wrong.
func TestSettlePasses(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	claim := func(stage string) queue.Claimed {
		t.Helper()
		c, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: stage, Cap: 1}}, nil)
		if err != nil || len(c) != 1 {
			t.Fatalf("claim at %s: %v, %v", stage, c, err)
		}
		return c[0]
	}
	type row struct {
		Status, Stage string
		Handed        *string
		Pass          int64
	}
	read := func(id int64) (r row) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, "SELECT status, stage, handed, pass FROM pepsi.state WHERE id = $1", id).
			Scan(&r.Status, &r.Stage, &r.Handed, &r.Pass); err != nil {
			t.Fatal(err)
		}
		return r
	}
	one := func(what string, v queue.Settle, want queue.Outcome) queue.Settled {
		t.Helper()
		got, err := settlePasses(ctx, db, []queue.Settle{v})
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: settled %+v, %v", what, got, err)
		}
		if got[0].Outcome != want {
			t.Errorf("%s: booked %q, want %q (%+v)", what, got[0].Outcome, want, got[0])
		}
		return got[0]
	}
	retry := queue.RetryPolicy{Retries: 5, Delay: 0, Max: 0}

	// A settle sent again after its answer was lost, once the row was
	// claimed again at the same stage (a retry that came due): the old
	// verdict leaves the new pass alone and books what the first sending
	// did, paused.
	id := seed1(t, db, "a", queue.Pending)
	p1 := claim("a")
	one("first settle", queue.Settle{ID: id, Stage: "a", Pass: p1.Pass, Verdict: queue.PassFailed, Retry: retry}, queue.OutPaused)
	db.Pool.Exec(ctx, "UPDATE pepsi.state SET status = 'pending', timeout = NULL WHERE id = $1", id)
	p2 := claim("a")
	s := one("the lost answer's settle again", queue.Settle{ID: id, Stage: "a", Pass: p1.Pass, Verdict: queue.PassFailed, Retry: retry}, queue.OutPaused)
	if r := read(id); r.Status != "running" || r.Pass != p2.Pass || r.Handed == nil || s.Changed() {
		t.Errorf("the second pass's row after the first's settle again: %+v (changed %v), want running pass %d", r, s.Changed(), p2.Pass)
	}
	// Advanced by the first settle and claimed at the next stage: requeued.
	one("second pass, advance", queue.Settle{ID: id, Stage: "a", Pass: p2.Pass, Verdict: queue.Advance, Next: "b"}, queue.OutRequeued)
	claim("b")
	one("the advance's settle again", queue.Settle{ID: id, Stage: "a", Pass: p2.Pass, Verdict: queue.Advance, Next: "b"}, queue.OutRequeued)
	if r := read(id); r.Status != "running" || r.Stage != "b" {
		t.Errorf("after the advance's settle again: %+v, want running at b", r)
	}

	// A claim a server crash lost: the row never ran the pass (it is
	// pending, its pass an older one). Booked reset, the row left alone.
	lost := seed1(t, db, "z", queue.Pending)
	one("a lost claim's pass", queue.Settle{ID: lost, Stage: "z", Pass: 1 << 50, Verdict: queue.NotRun}, queue.OutReset)
	if r := read(lost); r.Status != "pending" || r.Pass != 0 {
		t.Errorf("a lost claim's row: %+v, want pending, untouched", r)
	}

	// Cancelled with --force while it ran, retried and claimed again
	// before its old pass's verdict came: the verdict leaves the new pass
	// alone, and the old pass is booked cancelled.
	c := seed1(t, db, "a", queue.Pending)
	c1 := claim("a")
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.cancel(ARRAY[$1::bigint], 'alice', true)", c); err != nil {
		t.Fatal(err)
	}
	db.Pool.Exec(ctx, "UPDATE pepsi.state SET status = 'pending', error = NULL WHERE id = $1", c)
	c2 := claim("a")
	one("the cancelled pass's verdict", queue.Settle{ID: c, Stage: "a", Pass: c1.Pass, Verdict: queue.Finish}, queue.OutCancelled)
	if r := read(c); r.Status != "running" || r.Pass != c2.Pass {
		t.Errorf("after the cancelled pass's verdict: %+v, want running pass %d", r, c2.Pass)
	}

	// Held in the moments between its stage's pause and the pass's
	// settle: the settle gives it back (handed cleared) at once, booked
	// paused.
	h := seed1(t, db, "a", queue.Pending)
	h1 := claim("a")
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.pause($1, interval '0', $2)", h, h1.Pass); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.hold(ARRAY[$1::bigint])", h); err != nil {
		t.Fatal(err)
	}
	one("the held pass's settle", queue.Settle{ID: h, Stage: "a", Pass: h1.Pass, Verdict: queue.PassOK}, queue.OutPaused)
	if r := read(h); r.Status != "held" || r.Handed != nil {
		t.Errorf("held during its pause, after the settle: %+v, want held, handed cleared", r)
	}

	// Finished by its stage; the settle, then the settle again: done both
	// times, the row left alone.
	f := seed1(t, db, "a", queue.Pending)
	f1 := claim("a")
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.finish($1, $2)", f, f1.Pass); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"finished by its stage", "finished, again"} {
		if s := one(what, queue.Settle{ID: f, Stage: "a", Pass: f1.Pass, Verdict: queue.PassOK}, queue.OutDone); s.Before != queue.Done || s.After != queue.Done {
			t.Errorf("%s: %+v", what, s)
		}
	}
}
