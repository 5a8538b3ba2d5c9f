package admin_test

import (
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestSelection: the dashboard's bulk repairs. Counted first (a dry run
// changes nothing), then done: a retry of ticked ids leaves the pending
// one alone and the missing one out, and running rows at a stage a
// dispatcher owns to it while it retries the orphans; a retry of a filter
// (text, age) takes the matching rows only, at another stage with a
// priority; a purge deletes done and failed rows only; a count stops at
// its limit.
func TestSelection(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	failed := seed(t, db, "a", queue.Failed, 4)
	exec(t, db, "UPDATE pepsi.state SET error = 'boom ' || id WHERE id = ANY($1)", failed)
	exec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '2 days' WHERE id = $1", failed[3])
	pending := seed1(t, db, "a", queue.Pending)
	done := seed(t, db, "a", queue.Done, 2)
	owned := seed(t, db, "a", queue.Running, 2)
	orphan := seed1(t, db, "b", queue.Running)
	l := dial(t, dsn, "c")
	if err := l.TakeStages(ctx, []string{"a"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}

	ticked := admin.Selection{IDs: []int64{failed[0], pending, owned[0], orphan, 999999, failed[0]}}
	res, err := db.RedriveSelection(ctx, ticked, "", nil, true)
	if err != nil || res.Changed != 2 || res.Pending != 1 || res.Held != 1 || res.Missing != 1 || res.Holder == nil || res.Holder.PID != int32(l.PID()) {
		t.Fatalf("dry run of ticked ids = %+v, %v; want 2 to retry, 1 pending, 1 held by server pid %d, 1 missing", res, err, l.PID())
	}
	if st := getState(t, db, failed[0]); st.Status != queue.Failed {
		t.Fatalf("the dry run retried: %+v", st)
	}
	res, err = db.RedriveSelection(ctx, ticked, "", nil, false)
	if err != nil || res.Changed != 2 || res.Pending != 1 || res.Held != 1 || res.Missing != 1 {
		t.Fatalf("retry of ticked ids = %+v, %v", res, err)
	}
	for id, want := range map[int64]queue.Status{failed[0]: queue.Pending, orphan: queue.Pending, owned[0]: queue.Running, pending: queue.Pending, failed[1]: queue.Failed} {
		if st := getState(t, db, id); st.Status != want {
			t.Errorf("message %d after the retry: %+v, want %s", id, st, want)
		}
	}

	// A filter: failed at a, with "BOOM" in its error, changed within a day.
	prio := int32(-7)
	filter := admin.Selection{Stage: "a", Status: queue.Failed, Text: "BOOM", NewerThan: 24 * 3600e9}
	if n, more, err := db.CountSelection(ctx, filter, 0); err != nil || n != 2 || more {
		t.Errorf("CountSelection = %d, %v, %v; want 2", n, more, err)
	}
	if n, more, err := db.CountSelection(ctx, filter, 1); err != nil || n != 1 || !more {
		t.Errorf("CountSelection up to 1 = %d, %v, %v; want 1 and more", n, more, err)
	}
	res, err = db.RedriveSelection(ctx, filter, "b", &prio, false)
	if err != nil || res.Changed != 2 || res.Held != 0 {
		t.Fatalf("retry of a filter = %+v, %v", res, err)
	}
	for _, id := range failed[1:3] {
		if st := getState(t, db, id); st.Status != queue.Pending || st.Stage != "b" || st.Error != nil {
			t.Errorf("message %d after the filter's retry: %+v", id, st)
		}
		if p := count(t, db, "SELECT priority FROM pepsi.state WHERE id = $1", id); p != -7 {
			t.Errorf("message %d's priority: %d", id, p)
		}
	}
	if st := getState(t, db, failed[3]); st.Status != queue.Failed {
		t.Errorf("the old failed message was retried: %+v", st)
	}

	// A purge of ticked ids: the done and failed ones.
	purge := admin.Selection{IDs: []int64{done[0], failed[3], pending, owned[1]}}
	res, err = db.PurgeSelection(ctx, purge, true)
	if err != nil || res.Changed != 2 || res.Skipped != 2 {
		t.Fatalf("dry run of a purge = %+v, %v", res, err)
	}
	res, err = db.PurgeSelection(ctx, purge, false)
	if err != nil || res.Changed != 2 || res.Skipped != 2 {
		t.Fatalf("purge = %+v, %v", res, err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE id = ANY($1)", []int64{done[0], failed[3]}); n != 0 {
		t.Errorf("%d purged messages left", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", []int64{done[1], pending, owned[1]}); n != 3 {
		t.Errorf("%d of the others left, want 3", n)
	}
	if _, _, err := db.CountSelection(ctx, admin.Selection{Status: "lost"}, 0); err == nil {
		t.Error("an unknown status counted")
	}
}

// TestLiveCounts: every status but done by stage, running messages by the
// stage they were handed out at, enqueued ones not yet admitted as pending
// since their enqueue; done apart.
func TestLiveCounts(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	seed(t, db, "a", queue.Pending, 2)
	run := seed(t, db, "a", queue.Running, 3)
	exec(t, db, "UPDATE pepsi.state SET handed = 'z' WHERE id = $1", run[0])
	seed(t, db, "a", queue.Failed, 1)
	seed(t, db, "b", queue.Done, 4)
	exec(t, db, "SELECT pepsi.enqueue('b', '\\x'::bytea)")
	counts, now, err := db.LiveCounts(ctx)
	if err != nil || now.IsZero() {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range counts {
		got[c.Stage+"/"+string(c.Status)+"/"+c.HandedAt] += c.N
	}
	want := map[string]int64{"a/pending/": 2, "a/running/a": 2, "a/running/z": 1, "a/failed/": 1, "b/pending/": 1}
	if len(got) != len(want) {
		t.Errorf("LiveCounts = %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("LiveCounts[%s] = %d, want %d (%v)", k, got[k], n, got)
		}
	}
	done, err := db.DoneCounts(ctx)
	if err != nil || len(done) != 1 || done["b"] != 4 {
		t.Errorf("DoneCounts = %v, %v", done, err)
	}
}
