package queue_test

import (
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestFireSchedule: a slot is enqueued once, with its key, and moves the
// schedule's last slot; the same slot, or an earlier one, is refused
// afterwards, also once its message has finished and freed its key; a
// schedule seen for the first time does not enqueue a slot from before.
func TestFireSchedule(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	t0 := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)
	occ := func(slot, now time.Time) queue.Occurrence {
		return queue.Occurrence{Schedule: "tick", Slot: slot, Now: now, Stage: "a", Payload: []byte("p"),
			Headers: map[string]string{"source": "cron"}, Priority: -3}
	}
	fire := func(o queue.Occurrence) queue.Fired {
		t.Helper()
		f, err := db.FireSchedule(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	// First seen at t0 + 30s: the slot at t0 is from before it.
	if f := fire(occ(t0, t0.Add(30*time.Second))); f.Enqueued {
		t.Fatalf("a slot from before the schedule was first seen: %+v", f)
	}
	f := fire(occ(t0.Add(time.Minute), t0.Add(time.Minute)))
	if !f.Enqueued || f.ID == 0 || !f.After.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("the first slot: %+v, want enqueued after %v", f, t0.Add(30*time.Second))
	}
	var key, stage, headers string
	var prio int32
	if err := db.Pool.QueryRow(ctx, "SELECT s.dedup_key, s.stage, s.priority, m.headers::text FROM pepsi.state s JOIN pepsi.message m USING (id) WHERE id = $1",
		f.ID).Scan(&key, &stage, &prio, &headers); err != nil {
		t.Fatal(err)
	}
	if want := queue.ScheduleKey("tick", t0.Add(time.Minute)); key != want || want != "schedule:tick:1796576460" || stage != "a" || prio != -3 || headers != `{"source": "cron"}` {
		t.Errorf("message: key %q stage %q priority %d headers %s", key, stage, prio, headers)
	}

	// Finished: its key is free, but the slot went.
	if _, err := db.Pool.Exec(ctx, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", f.ID); err != nil {
		t.Fatal(err)
	}
	if g := fire(occ(t0.Add(time.Minute), t0.Add(2*time.Minute))); g.Enqueued {
		t.Errorf("the same slot again: %+v", g)
	}
	if g := fire(occ(t0.Add(30*time.Second), t0.Add(2*time.Minute))); g.Enqueued {
		t.Errorf("an earlier slot: %+v", g)
	}

	// Racing janitors (a split brain the fence did not stop): one wins.
	slot := t0.Add(10 * time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Go(func() {
			f, err := db.FireSchedule(ctx, occ(slot, slot))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if f.Enqueued {
				won++
				if !f.After.Equal(t0.Add(time.Minute)) {
					t.Errorf("after %v, want the last slot %v", f.After, t0.Add(time.Minute))
				}
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d of 8 racing fires enqueued the slot, want 1", won)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE dedup_key LIKE 'schedule:tick:%'"); n != 2 {
		t.Errorf("%d messages, want 2", n)
	}

	runs, err := db.Schedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Name != "tick" || !runs[0].Since.Equal(t0.Add(30*time.Second)) ||
		runs[0].LastSlot == nil || !runs[0].LastSlot.Equal(slot) || runs[0].LastID == nil || runs[0].LastAt == nil {
		t.Errorf("Schedules: %+v", runs)
	}
}

// TestSkipSchedule: an occurrence whose values the server refuses (a NUL
// in its headers: 22P05) fails with a data error and enqueues nothing;
// SkipSchedule then records its slot as gone without a message (Skipped),
// never moving the last slot back; the next slot enqueued clears it.
func TestSkipSchedule(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	t0 := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)
	bad := queue.Occurrence{Schedule: "p", Slot: t0.Add(time.Minute), Now: t0, Stage: "a", Headers: map[string]string{"a": "\x00"}}
	if _, err := db.FireSchedule(ctx, queue.Occurrence{Schedule: "p", Slot: t0, Now: t0, Stage: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err := db.FireSchedule(ctx, bad)
	if code, _ := pgerr.SQLState(err); code != "22P05" || !queue.IsDataError(err) || queue.IsOutage(err) {
		t.Fatalf("a NUL in the headers: %v (data error %v), want SQLSTATE 22P05, a data error", err, queue.IsDataError(err))
	}
	run := func() queue.ScheduleRun {
		t.Helper()
		runs, err := db.Schedules(ctx)
		if err != nil || len(runs) != 1 {
			t.Fatalf("schedules %+v, %v", runs, err)
		}
		return runs[0]
	}
	if r := run(); r.Skipped() || r.LastSlot != nil {
		t.Fatalf("before the skip: %+v", r)
	}
	for _, want := range []bool{true, false} { // the second time: not after the last slot
		if moved, err := db.SkipSchedule(ctx, bad); err != nil || moved != want {
			t.Fatalf("SkipSchedule: moved %v, %v; want %v", moved, err, want)
		}
	}
	if moved, err := db.SkipSchedule(ctx, queue.Occurrence{Schedule: "p", Slot: t0.Add(30 * time.Second), Now: t0}); err != nil || moved {
		t.Fatalf("SkipSchedule of an earlier slot: moved %v, %v", moved, err)
	}
	if r := run(); !r.Skipped() || !r.LastSlot.Equal(bad.Slot) || r.LastAt == nil {
		t.Errorf("after the skip: %+v, want its slot skipped", r)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state"); n != 0 {
		t.Errorf("%d messages, want none", n)
	}
	f, err := db.FireSchedule(ctx, queue.Occurrence{Schedule: "p", Slot: t0.Add(2 * time.Minute), Now: t0, Stage: "a"})
	if err != nil || !f.Enqueued || !f.After.Equal(bad.Slot) {
		t.Fatalf("the next slot: %+v, %v", f, err)
	}
	if r := run(); r.Skipped() || r.LastID == nil || *r.LastID != f.ID {
		t.Errorf("after the next slot: %+v", r)
	}
	for _, code := range []string{"22P05", "22021", "23514", "54000"} {
		if err := (&pgconn.PgError{Code: code}); !queue.IsDataError(err) {
			t.Errorf("SQLSTATE %s: not a data error", code)
		}
	}
	for _, code := range []string{"23505", "40001", "42501", "57P01", "08006"} {
		if err := (&pgconn.PgError{Code: code}); queue.IsDataError(err) {
			t.Errorf("SQLSTATE %s: a data error", code)
		}
	}
}
