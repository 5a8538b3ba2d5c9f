package admin_test

import (
	"errors"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// statusOf reads one message's status.
func statusOf(t testing.TB, db *testDB, id int64) queue.Status {
	t.Helper()
	var st string
	if err := db.Pool.QueryRow(testCtx(t), "SELECT status FROM pepsi.state WHERE id = $1", id).Scan(&st); err != nil {
		t.Fatalf("status of %d: %v", id, err)
	}
	return queue.Status(st)
}

// TestStagePause: PauseStage records the acting user and reason, keeps
// the first pause when paused again, PausedStages lists it, ResumeStage
// returns the pause it ended; StageSeen knows stages by their messages,
// statistics or pause.
func TestStagePause(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	p, already, err := db.PauseStage(ctx, "parse", "alice", "the API is down")
	if err != nil || already || p.Stage != "parse" || p.By != "alice" || p.Reason != "the API is down" || p.At.IsZero() {
		t.Fatalf("PauseStage: %+v, already %v, %v", p, already, err)
	}
	if p2, already, err := db.PauseStage(ctx, "parse", "bob", "other"); err != nil || !already || p2 != p {
		t.Errorf("second PauseStage: %+v, already %v, %v; want the first, %+v", p2, already, err, p)
	}
	if _, _, err := db.PauseStage(ctx, "a b", "bob", ""); err == nil {
		t.Error("PauseStage of a bad stage name: no error")
	}
	ps, err := db.PausedStages(ctx)
	if err != nil || len(ps) != 1 || ps[0] != p {
		t.Errorf("PausedStages: %+v, %v", ps, err)
	}
	seed1(t, db, "queued", queue.Pending)
	for stage, want := range map[string]bool{"parse": true, "queued": true, "nowhere": false} {
		if seen, err := db.StageSeen(ctx, stage); err != nil || seen != want {
			t.Errorf("StageSeen(%s) = %v, %v; want %v", stage, seen, err, want)
		}
	}
	if ended, was, err := db.ResumeStage(ctx, "parse"); err != nil || !was || ended != p {
		t.Errorf("ResumeStage: %+v, %v, %v", ended, was, err)
	}
	if _, was, err := db.ResumeStage(ctx, "parse"); err != nil || was {
		t.Errorf("second ResumeStage: %v, %v", was, err)
	}
}

// TestControlsDryRun: a dry run counts what Hold, Release and Cancel would
// change, by id and by status, and changes nothing; a missing id is a
// *NotFoundError; Cancel needs an acting user; Release counts a message
// that is not held, running or not, as skipped.
func TestControlsDryRun(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	pend := seed(t, db, "s", queue.Pending, 3)
	run := seed1(t, db, "s", queue.Running)
	ids := append(append([]int64{}, pend...), run)

	res, err := db.Hold(ctx, admin.ControlParams{IDs: ids, DryRun: true})
	if err != nil || res.Changed != 3 || res.Running != 1 || res.Skipped != 0 {
		t.Errorf("Hold dry run by id: %+v, %v", res, err)
	}
	res, err = db.Cancel(ctx, admin.ControlParams{Status: queue.Pending, Stage: "s", By: "alice", DryRun: true})
	if err != nil || res.Changed != 3 {
		t.Errorf("Cancel dry run by status: %+v, %v", res, err)
	}
	for _, id := range pend {
		if st := statusOf(t, db, id); st != queue.Pending {
			t.Errorf("message %d is %s after dry runs", id, st)
		}
	}
	res, err = db.Release(ctx, admin.ControlParams{IDs: ids})
	if err != nil || res.Changed != 0 || res.Skipped != 4 || res.Running != 0 {
		t.Errorf("Release of messages not held: %+v, %v", res, err)
	}
	if _, err := db.Hold(ctx, admin.ControlParams{IDs: []int64{pend[0], 999999}}); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("Hold of a missing id: %v", err)
	}
	if st := statusOf(t, db, pend[0]); st != queue.Pending {
		t.Errorf("a Hold that failed on a missing id held %d: %s", pend[0], st)
	}
	if _, err := db.Cancel(ctx, admin.ControlParams{IDs: pend}); err == nil {
		t.Error("Cancel without an acting user: no error")
	}
	if _, err := db.Hold(ctx, admin.ControlParams{Status: queue.Done}); err == nil {
		t.Error("Hold of done messages: no error")
	}
}
