package queue

import (
	"context"
	"time"
)

// ResetOrphans puts running rows that are not in held, and were last
// updated longer ago than olderThan, back to pending: rows a dispatcher
// claimed but lost track of (a claim whose answer was lost with its
// connection, a dispatcher killed outright). With stages, only rows handed
// out at those stages are reset (a dispatcher with a stage set sweeps its
// own). Paused rows of passes not held are made resumable (see
// settleSQL).
func (db *DB) ResetOrphans(ctx context.Context, held []int64, olderThan time.Duration, stages ...string) (int64, error) {
	if held == nil {
		held = []int64{}
	}
	var n int64
	err := Retry(ctx, func() error {
		tag, err := db.execFenced(ctx, `WITH unhand AS (
			UPDATE pepsi.state SET handed = NULL
			 WHERE status = 'paused' AND handed IS NOT NULL AND updated_at <= now() - $2::interval AND NOT (id = ANY($1))
			   AND ($3::text[] IS NULL OR handed = ANY($3)))
			UPDATE pepsi.state s SET status = 'pending', updated_at = now(), handed = NULL,
			flow_key = `+flowKeyHere+`
			WHERE status = 'running' AND updated_at <= now() - $2::interval AND NOT (id = ANY($1))
			  AND ($3::text[] IS NULL OR `+HandedAt+` = ANY($3))`, held, olderThan, stages)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// ExpireDone runs one batch of the retention sweep, deleting messages done
// longer ago than olderThan: in the oldest range of pepsi.state_done that
// has expired, the messages of the next batch rows by id (the range is
// dropped whole once they are gone); when none has, the expired ones among
// the next batch rows of the default partition. The next rows are those
// after at's ID when at is the partition it works in. It returns where the
// next batch goes on, how many messages it deleted, and whether a next
// batch has work (see pepsi.expire_done in sql/009_done_partitions.sql).
func (db *DB) ExpireDone(ctx context.Context, at ExpireAt, olderThan time.Duration, batch int) (next ExpireAt, deleted int64, more bool, err error) {
	err = Retry(ctx, func() error {
		return db.queryRowFenced(ctx, "SELECT part, last, deleted, more FROM pepsi.expire_done($1::interval, $2, $3, $4)",
			[]any{olderThan, at.Part, at.ID, batch}, &next.Part, &next.ID, &deleted, &more)
	})
	return next, deleted, more, err
}

// ExpireAt is where a retention sweep goes on: after the row ID of the
// partition Part ("" and 0: at the start).
type ExpireAt struct {
	Part string
	ID   int64
}

// DoneAhead creates the ranges of pepsi.state_done, width each, from the
// end of the last one to ahead widths past now, and returns how many it
// created. A range it cannot create now (a lock not had within a second)
// is left to the next call.
func (db *DB) DoneAhead(ctx context.Context, width time.Duration, ahead int) (int, error) {
	var n int
	err := Retry(ctx, func() error {
		return db.queryRowFenced(ctx, "SELECT pepsi.done_ahead($1::interval, $2)", []any{width, ahead}, &n)
	})
	return n, err
}

// MessageAhead creates the ranges of pepsi.message, width ids each (0:
// the width of the last one), from the end of the last one to ahead
// widths past the id sequence, and returns how many it created and the
// sequence's value. A range it cannot create now (a lock not had within
// 200 ms) is left to the next call (see pepsi.message_ahead in
// sql/012_message_ranges.sql).
func (db *DB) MessageAhead(ctx context.Context, width int64, ahead int) (created int, seq int64, err error) {
	var w *int64
	if width > 0 {
		w = &width
	}
	err = Retry(ctx, func() error {
		return db.queryRowFenced(ctx, "SELECT created, seq FROM pepsi.message_ahead($1, $2)", []any{w, ahead}, &created, &seq)
	})
	return created, seq, err
}

// RetireMessages drops the ranges of pepsi.message whose ids have all been
// drawn and of which at most left are still queued (at most most ranges,
// oldest first), moving those few messages to the default partition, and
// returns how many ranges it dropped and messages it moved.
func (db *DB) RetireMessages(ctx context.Context, left, most int) (dropped int, moved int64, err error) {
	err = Retry(ctx, func() error {
		return db.queryRowFenced(ctx, "SELECT dropped, moved FROM pepsi.message_retire($1, $2)", []any{left, most}, &dropped, &moved)
	})
	return dropped, moved, err
}
