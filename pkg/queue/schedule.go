package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Periodic enqueue ([schedule-NAME] in pepsi.conf): the janitor
// dispatcher enqueues each slot of a schedule once, recorded in
// pepsi.schedule in the transaction of its enqueue (sql/018_schedule.sql).

// Occurrence is one slot of a schedule, to be enqueued.
type Occurrence struct {
	Schedule string    // the NAME of [schedule-NAME]
	Slot     time.Time // the slot, a whole second
	Now      time.Time // the clock when the slot was found due: a schedule first seen starts here
	Stage    string
	Payload  []byte
	Headers  map[string]string
	Priority int32
}

// Fired is what FireSchedule did.
type Fired struct {
	Enqueued bool      // the slot was enqueued now (false: it, or a later one, went before; or it is from before the schedule was first seen)
	ID       int64     // the message, when Enqueued
	After    time.Time // the slot before it (or when the schedule was first seen), when Enqueued
}

// ScheduleKey is the deduplication key of a schedule's slot:
// schedule:NAME:UNIX-SECONDS.
func ScheduleKey(name string, slot time.Time) string {
	return fmt.Sprintf("schedule:%s:%d", name, slot.Unix())
}

// fireScheduleSQL moves the schedule's last slot forward to $2, and
// returns the slot before it, unless $2 is not after it (nor after since,
// for a schedule never enqueued). A racing transaction that moved it
// first is waited for, and its slot then compared with (READ COMMITTED
// takes the row as it committed).
const fireScheduleSQL = `
UPDATE pepsi.schedule s SET last_slot = $2, last_at = now()
  FROM (SELECT name, coalesce(last_slot, since) AS after FROM pepsi.schedule WHERE name = $1 FOR UPDATE) o
 WHERE s.name = o.name AND $2 > o.after
RETURNING o.after`

// FireSchedule enqueues the occurrence o, with the key ScheduleKey, in one
// transaction (after the dispatcher's fence, when it has one) that moves
// the schedule's last slot forward to it: unless a slot as late or later
// went before, so each slot is enqueued at most once whoever tries it and
// however often. A schedule without a row gets one, first seen at o.Now.
func (db *DB) FireSchedule(ctx context.Context, o Occurrence) (Fired, error) {
	var f Fired
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		f = Fired{}
		if err := db.scheduleRow(ctx, tx, o); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, fireScheduleSQL, o.Schedule, o.Slot).Scan(&f.After)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		id, _, err := EnqueueKeyed(ctx, tx, Keyed{Stage: o.Stage, Payload: o.Payload, Headers: o.Headers, Priority: o.Priority,
			Key: ScheduleKey(o.Schedule, o.Slot)})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE pepsi.schedule SET last_id = $2 WHERE name = $1", o.Schedule, id); err != nil {
			return err
		}
		f.Enqueued, f.ID = true, id
		return nil
	})
	return f, err
}

// scheduleRow takes the dispatcher's fence, when it has one, in tx, and
// gives o's schedule a row if it has none, first seen at o.Now.
func (db *DB) scheduleRow(ctx context.Context, tx pgx.Tx, o Occurrence) error {
	if fc := db.fence.Load(); fc != nil {
		if _, err := tx.Exec(ctx, fenceSQL, fc.token, fc.stages); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, "INSERT INTO pepsi.schedule (name, since) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", o.Schedule, o.Now)
	return err
}

// SkipSchedule records the occurrence o as gone without a message, once
// the server refused its enqueue for the values it carries (IsDataError),
// which no retry mends: the schedule's last slot moves forward to it, with
// no last message, unless a slot as late or later went before. It reports
// whether it moved. The schedule's next slot is enqueued as usual.
func (db *DB) SkipSchedule(ctx context.Context, o Occurrence) (bool, error) {
	var moved bool
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if err := db.scheduleRow(ctx, tx, o); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE pepsi.schedule SET last_slot = $2, last_id = NULL, last_at = now()
			WHERE name = $1 AND $2 > coalesce(last_slot, since)`, o.Schedule, o.Slot)
		moved = tag.RowsAffected() == 1
		return err
	})
	return moved, err
}

// ScheduleRun is a schedule's row of pepsi.schedule.
type ScheduleRun struct {
	Name     string     `json:"name"`
	Since    time.Time  `json:"since,omitzero"`      // when a dispatcher first saw it
	LastSlot *time.Time `json:"last_slot,omitempty"` // the latest slot enqueued or skipped; nil: none yet
	LastID   *int64     `json:"last_id,omitempty"`   // its message; nil with a LastSlot: skipped, its enqueue refused (SkipSchedule)
	LastAt   *time.Time `json:"last_at,omitempty"`   // when it was enqueued or skipped
}

// Skipped reports whether the schedule's last slot was skipped: its
// enqueue refused for the values it carries.
func (r ScheduleRun) Skipped() bool { return r.LastSlot != nil && r.LastID == nil }

// Schedules reads pepsi.schedule, by name.
func (db *DB) Schedules(ctx context.Context) ([]ScheduleRun, error) {
	rows, err := db.pool.Query(ctx, "SELECT name, since, last_slot, last_id, last_at FROM pepsi.schedule ORDER BY name")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ScheduleRun, error) {
		var s ScheduleRun
		err := r.Scan(&s.Name, &s.Since, &s.LastSlot, &s.LastID, &s.LastAt)
		return s, err
	})
}
