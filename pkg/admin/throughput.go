package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The dashboard's throughput history (pepsi.throughput, schema 27): the
// statistics' totals per stage, written by pepsi httpd once a chart's bar
// and read back when it starts, so that its charts survive a restart.

// ThroughputSample is the statistics' totals at one moment: per stage its
// passes that ended ok (Processed) and its failed passes (Failed: failed
// answers, timeouts and crashes).
type ThroughputSample struct {
	At     time.Time
	Stages []queue.StageStats
}

// saveThroughputSQL writes a sample ($1, the stages $2 with their
// processed $3 and failed $4 passes) and deletes the samples older than
// $5 before it.
const saveThroughputSQL = `
WITH gone AS (DELETE FROM pepsi.throughput WHERE at < $1::timestamptz - $5::interval)
INSERT INTO pepsi.throughput (at, stage, processed, failed)
SELECT $1, u.stage, u.processed, u.failed FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS u(stage, processed, failed)
ON CONFLICT DO NOTHING`

// SaveThroughput writes the totals of stages (their Processed, and their
// Failed, Timeouts and Crashes as failed passes) read at at, and deletes
// the samples older than keep before at.
func (db *DB) SaveThroughput(ctx context.Context, at time.Time, stages []queue.StageStats, keep time.Duration) error {
	names := make([]string, 0, len(stages))
	ok := make([]int64, 0, len(stages))
	failed := make([]int64, 0, len(stages))
	for _, s := range stages {
		names, ok, failed = append(names, s.Stage), append(ok, s.Processed), append(failed, s.Failed+s.Timeouts+s.Crashes)
	}
	_, err := db.pool.Exec(ctx, saveThroughputSQL, at, names, ok, failed, keep)
	return err
}

// Throughput reads the samples taken at or after since, oldest first;
// each sample's Stages have Processed and Failed (the failed passes, of
// every kind) set.
func (db *DB) Throughput(ctx context.Context, since time.Time) ([]ThroughputSample, error) {
	rows, err := db.pool.Query(ctx, `SELECT at, stage, processed, failed FROM pepsi.throughput WHERE at >= $1 ORDER BY at, stage`, since)
	if err != nil {
		return nil, err
	}
	var out []ThroughputSample
	var at time.Time
	var s queue.StageStats
	_, err = pgx.ForEachRow(rows, []any{&at, &s.Stage, &s.Processed, &s.Failed}, func() error {
		if n := len(out); n == 0 || !out[n-1].At.Equal(at) {
			out = append(out, ThroughputSample{At: at})
		}
		out[len(out)-1].Stages = append(out[len(out)-1].Stages, s)
		return nil
	})
	return out, err
}
