package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// nextDueOfSQL is the earliest timeout of the paused messages at each
// stage of $1: one descent of state_paused_stage (stage, timeout) per
// stage, however many are paused (NextDue reads them all).
const nextDueOfSQL = `
SELECT s.stage, (SELECT min(l.timeout) FROM pepsi.state_live l WHERE l.status = 'paused' AND l.stage = s.stage)
  FROM unnest($1::text[]) AS s(stage)`

// NextDueOf returns, for each of stages with a paused message, when its
// earliest one (a retry, or a scheduled message) falls due; the
// dashboard's overview asks only about the stages its counts show paused
// messages at.
func (db *DB) NextDueOf(ctx context.Context, stages []string) (map[string]time.Time, error) {
	if len(stages) == 0 {
		return map[string]time.Time{}, nil
	}
	return dueByStage(db.pool.Query(ctx, nextDueOfSQL, stages))
}

// dueByStage reads rows of (stage, earliest timeout) into a map, leaving
// out the stages whose timeout is NULL.
func dueByStage(rows pgx.Rows, err error) (map[string]time.Time, error) {
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	var stage string
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&stage, &at}, func() error {
		if at != nil {
			out[stage] = *at
		}
		return nil
	})
	return out, err
}
