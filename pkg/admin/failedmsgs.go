package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailedMessages counts, per stage, the messages that failed within each
// of n spans of width ending at end (oldest first) and are failed still:
// by when they were last updated, along state_failed_updated (schema 25),
// so that the count reads the recent failures alone however many failed
// messages are kept. A message a stage dead-lettered itself
// (pepsi.fail()) counts, as does one whose failed passes ran out of
// retries; a cancelled one does not (it is not failed).
func (db *DB) FailedMessages(ctx context.Context, end time.Time, width time.Duration, n int) (map[string][]int64, error) {
	from := end.Add(-time.Duration(n) * width)
	rows, err := db.pool.Query(ctx, `SELECT stage, width_bucket(extract(epoch FROM updated_at), $1::float8, $2::float8, $3), count(*)
	  FROM pepsi.state WHERE status = 'failed' AND updated_at >= $4 AND updated_at < $5
	 GROUP BY 1, 2`, float64(from.UnixMicro())/1e6, float64(end.UnixMicro())/1e6, n, from, end)
	if err != nil {
		return nil, err
	}
	out := map[string][]int64{}
	var stage string
	var bucket int
	var c int64
	_, err = pgx.ForEachRow(rows, []any{&stage, &bucket, &c}, func() error {
		if bucket < 1 || bucket > n { // rounding at the ends
			bucket = min(max(bucket, 1), n)
		}
		if out[stage] == nil {
			out[stage] = make([]int64, n)
		}
		out[stage][bucket-1] += c
		return nil
	})
	return out, err
}
