package queue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// StageStats is one stage's counters: deltas when flushed, totals when read.
type StageStats struct {
	Stage       string    `json:"stage"`
	Processed   int64     `json:"processed"`
	Failed      int64     `json:"failed"`
	Timeouts    int64     `json:"timeouts"`
	Crashes     int64     `json:"crashes"`
	BusySeconds float64   `json:"busy_seconds"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// IsZero reports whether s holds no counts.
func (s *StageStats) IsZero() bool {
	return s.Processed == 0 && s.Failed == 0 && s.Timeouts == 0 && s.Crashes == 0 && s.BusySeconds == 0
}

// DispatchStats is the dispatcher's global counters.
type DispatchStats struct {
	Claimed     int64     `json:"claimed"`      // rows moved pending → running
	StagePasses int64     `json:"stage_passes"` // answers received, fused stages included
	Requeued    int64     `json:"requeued"`     // advanced rows put back to pending
	Done        int64     `json:"done"`         // messages finished
	Failed      int64     `json:"failed"`       // messages that ended failed
	Paused      int64     `json:"paused"`       // passes that paused their message
	Resumed     int64     `json:"resumed"`      // paused rows flipped back to pending
	Reset       int64     `json:"reset"`        // claimed rows put back unrun (shutdown, crashes, timeouts)
	Orphans     int64     `json:"orphans"`      // running rows no worker held, reset (at start, after a reconnect, by the sweep)
	Expired     int64     `json:"expired"`      // done messages deleted by the retention sweep
	UpdatedAt   time.Time `json:"updated_at"`
}

// IsZero reports whether d holds no counts.
func (d *DispatchStats) IsZero() bool {
	return d.Claimed == 0 && d.StagePasses == 0 && d.Requeued == 0 && d.Done == 0 &&
		d.Failed == 0 && d.Paused == 0 && d.Resumed == 0 && d.Reset == 0 && d.Orphans == 0 && d.Expired == 0
}

const addStageStatsSQL = `
INSERT INTO pepsi.stage_stats AS t (stage, processed, failed, timeouts, crashes, busy_seconds)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::float8[])
ON CONFLICT (stage) DO UPDATE SET
    processed    = t.processed + EXCLUDED.processed,
    failed       = t.failed + EXCLUDED.failed,
    timeouts     = t.timeouts + EXCLUDED.timeouts,
    crashes      = t.crashes + EXCLUDED.crashes,
    busy_seconds = t.busy_seconds + EXCLUDED.busy_seconds,
    updated_at   = now()`

const addDispatchStatsSQL = `
UPDATE pepsi.dispatch_stats SET
    claimed = claimed + $1, stage_passes = stage_passes + $2, requeued = requeued + $3,
    done = done + $4, failed = failed + $5, paused = paused + $6, resumed = resumed + $7,
    reset = reset + $8, orphans = orphans + $9, expired = expired + $10, updated_at = now()`

// AddStats adds the deltas to the statistics tables in one transaction.
// Stages with zero deltas are skipped; nothing is written when all are zero.
func (db *DB) AddStats(ctx context.Context, stages []StageStats, d DispatchStats) error {
	var names []string
	var processed, failed, timeouts, crashes []int64
	var busy []float64
	for i := range stages {
		s := &stages[i]
		if s.IsZero() {
			continue
		}
		names = append(names, s.Stage)
		processed = append(processed, s.Processed)
		failed = append(failed, s.Failed)
		timeouts = append(timeouts, s.Timeouts)
		crashes = append(crashes, s.Crashes)
		busy = append(busy, s.BusySeconds)
	}
	if len(names) == 0 && d.IsZero() {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if len(names) > 0 {
			b.Queue(addStageStatsSQL, names, processed, failed, timeouts, crashes, busy)
		}
		if !d.IsZero() {
			b.Queue(addDispatchStatsSQL, d.Claimed, d.StagePasses, d.Requeued, d.Done, d.Failed, d.Paused, d.Resumed, d.Reset, d.Orphans, d.Expired)
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

// ReadStats returns every stage's totals (by name) and the global totals.
func (db *DB) ReadStats(ctx context.Context) ([]StageStats, DispatchStats, error) {
	var d DispatchStats
	rows, err := db.pool.Query(ctx, `SELECT stage, processed, failed, timeouts, crashes, busy_seconds, updated_at
		FROM pepsi.stage_stats ORDER BY stage`)
	if err != nil {
		return nil, d, err
	}
	stages, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StageStats, error) {
		var s StageStats
		err := r.Scan(&s.Stage, &s.Processed, &s.Failed, &s.Timeouts, &s.Crashes, &s.BusySeconds, &s.UpdatedAt)
		return s, err
	})
	if err != nil {
		return nil, d, err
	}
	err = db.pool.QueryRow(ctx, `SELECT claimed, stage_passes, requeued, done, failed, paused, resumed, reset, orphans, expired, updated_at
		FROM pepsi.dispatch_stats`).Scan(&d.Claimed, &d.StagePasses, &d.Requeued, &d.Done, &d.Failed, &d.Paused, &d.Resumed, &d.Reset, &d.Orphans, &d.Expired, &d.UpdatedAt)
	return stages, d, err
}
