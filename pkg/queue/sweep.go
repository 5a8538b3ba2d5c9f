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
// own).
func (db *DB) ResetOrphans(ctx context.Context, held []int64, olderThan time.Duration, stages ...string) (int64, error) {
	if held == nil {
		held = []int64{}
	}
	var n int64
	err := retry(ctx, func() error {
		tag, err := db.execFenced(ctx, `UPDATE pepsi.state s SET status = 'pending', updated_at = now(), handed = NULL,
			flow_key = `+flowKeyHere+`
			WHERE status = 'running' AND updated_at <= now() - $2::interval AND NOT (id = ANY($1))
			  AND ($3::text[] IS NULL OR `+handedAt+` = ANY($3))`, held, olderThan, stages)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// ExpireDone deletes, among the next batch rows by id after after, the
// messages done longer ago than olderThan. It returns the last id it looked
// at (0 when there were no more rows) and how many it deleted.
func (db *DB) ExpireDone(ctx context.Context, after int64, olderThan time.Duration, batch int) (last, deleted int64, err error) {
	err = retry(ctx, func() error {
		var lastp *int64
		err := db.queryRowFenced(ctx, `
WITH batch AS (
    SELECT id, status, updated_at FROM pepsi.state WHERE id > $1 ORDER BY id LIMIT $3
), del AS (
    DELETE FROM pepsi.message m USING batch b
     WHERE m.id = b.id AND b.status = 'done' AND b.updated_at <= now() - $2::interval
    RETURNING m.id
)
SELECT (SELECT max(id) FROM batch), (SELECT count(*) FROM del)`, []any{after, olderThan, batch}, &lastp, &deleted)
		if lastp != nil {
			last = *lastp
		}
		return err
	})
	return last, deleted, err
}
