package queue

import (
	"context"
	"slices"
	"strings"
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
	NotRun      int64     `json:"not_run"`   // answers 75: not run, not counted as an attempt
	Cancelled   int64     `json:"cancelled"` // passes whose message was cancelled while they ran: outcome ignored
	BusySeconds float64   `json:"busy_seconds"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// IsZero reports whether s holds no counts.
func (s *StageStats) IsZero() bool {
	return s.Processed == 0 && s.Failed == 0 && s.Timeouts == 0 && s.Crashes == 0 && s.NotRun == 0 && s.Cancelled == 0 && s.BusySeconds == 0
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
	Cancelled   int64     `json:"cancelled"`    // passes whose message was cancelled while they ran: outcome ignored
	Joined      int64     `json:"joined"`       // parents released at their join stage: every child ended
	JoinFailed  int64     `json:"join_failed"`  // parents failed at their join: a child failed (JOIN_POLICY fail)
	UpdatedAt   time.Time `json:"updated_at"`
}

// IsZero reports whether d holds no counts.
func (d *DispatchStats) IsZero() bool {
	return d.Claimed == 0 && d.StagePasses == 0 && d.Requeued == 0 && d.Done == 0 &&
		d.Failed == 0 && d.Paused == 0 && d.Resumed == 0 && d.Reset == 0 && d.Orphans == 0 && d.Expired == 0 && d.Cancelled == 0 &&
		d.Joined == 0 && d.JoinFailed == 0
}

// AllStages is the name of the set of a dispatcher that owns every stage,
// in the statistics and wake rows.
const AllStages = "*"

// SetName is the name of a dispatcher's stage set in the statistics and
// wake rows: its stages, sorted, joined by commas; AllStages for nil. A
// standby of the same set writes the same rows.
func SetName(stages []string) string {
	if stages == nil {
		return AllStages
	}
	s := slices.Clone(stages)
	slices.Sort(s)
	return strings.Join(s, ",")
}

// The statistics rows are per stage and writer (the dispatcher set that
// counted them), and the global row per writer: each row has one writer
// (the set's dispatcher, or its standby once it has taken over), and
// readers add them up. recent_not_run and recent_passes are the deltas
// of the latest write that counted anything at the stage (see
// NotRunStages).
const addStageStatsSQL = `
INSERT INTO pepsi.stage_stats AS t (dispatcher, stage, processed, failed, timeouts, crashes, not_run, cancelled, busy_seconds,
                                    recent_not_run, recent_passes)
SELECT $9, v.*, v.not_run, v.processed + v.failed + v.timeouts + v.crashes + v.cancelled
  FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::float8[])
       AS v(stage, processed, failed, timeouts, crashes, not_run, cancelled, busy_seconds)
ON CONFLICT (stage, dispatcher) DO UPDATE SET
    processed      = t.processed + EXCLUDED.processed,
    failed         = t.failed + EXCLUDED.failed,
    timeouts       = t.timeouts + EXCLUDED.timeouts,
    crashes        = t.crashes + EXCLUDED.crashes,
    not_run        = t.not_run + EXCLUDED.not_run,
    cancelled      = t.cancelled + EXCLUDED.cancelled,
    busy_seconds   = t.busy_seconds + EXCLUDED.busy_seconds,
    recent_not_run = EXCLUDED.recent_not_run,
    recent_passes  = EXCLUDED.recent_passes,
    updated_at     = now()`

const addDispatchStatsSQL = `
INSERT INTO pepsi.dispatch_stats AS t (dispatcher, claimed, stage_passes, requeued, done, failed, paused, resumed, reset, orphans, expired, cancelled,
                                       joined, join_failed)
VALUES ($11, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12, $13, $14)
ON CONFLICT (dispatcher) DO UPDATE SET
    claimed = t.claimed + $1, stage_passes = t.stage_passes + $2, requeued = t.requeued + $3,
    done = t.done + $4, failed = t.failed + $5, paused = t.paused + $6, resumed = t.resumed + $7,
    reset = t.reset + $8, orphans = t.orphans + $9, expired = t.expired + $10, cancelled = t.cancelled + $12,
    joined = t.joined + $13, join_failed = t.join_failed + $14,
    updated_at = now()`

// AddStats adds the deltas to the statistics tables in one transaction, to
// the rows of the pool's writer (Options.Writer).
// Stages with zero deltas are skipped; nothing is written when all are zero.
func (db *DB) AddStats(ctx context.Context, stages []StageStats, d DispatchStats) error {
	if statsZero(stages, d) {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error { return db.addStats(ctx, tx, stages, d) })
}

// statsZero reports whether there is nothing to add.
func statsZero(stages []StageStats, d DispatchStats) bool {
	for i := range stages {
		if !stages[i].IsZero() {
			return false
		}
	}
	return d.IsZero()
}

// StatsFlush is one write of statistics deltas that is applied at most
// once: sent again with the same Token and Seq after a failure whose
// commit may have gone through, it is skipped if it was applied.
type StatsFlush struct {
	Token  int64 // the writer's, for the run (a new run starts afresh)
	Seq    int64 // increasing for each write of a run
	Stages []StageStats
	Global DispatchStats
}

// statsFlushSQL claims a flush for this writer: a row comes back unless
// this token has written this sequence number (or a later one) already.
const statsFlushSQL = `
INSERT INTO pepsi.stats_flush AS f (dispatcher, token, seq) VALUES ($1, $2, $3)
ON CONFLICT (dispatcher) DO UPDATE SET token = EXCLUDED.token, seq = EXCLUDED.seq, updated_at = now()
 WHERE f.token <> EXCLUDED.token OR f.seq < EXCLUDED.seq
RETURNING true`

// AddStatsOnce applies flushes, in order and in one transaction, each
// one only if it was not applied before (see StatsFlush).
func (db *DB) AddStatsOnce(ctx context.Context, flushes []StatsFlush) error {
	return db.inTx(ctx, func(tx pgx.Tx) error {
		for i := range flushes {
			f := &flushes[i]
			var fresh bool
			err := tx.QueryRow(ctx, statsFlushSQL, db.writer, f.Token, f.Seq).Scan(&fresh)
			if isNoRows(err) {
				continue // applied by a write whose commit was not acknowledged
			}
			if err != nil {
				return err
			}
			if err := db.addStats(ctx, tx, f.Stages, f.Global); err != nil {
				return err
			}
		}
		return nil
	})
}

// addStats adds the deltas on tx.
func (db *DB) addStats(ctx context.Context, tx pgx.Tx, stages []StageStats, d DispatchStats) error {
	var names []string
	var processed, failed, timeouts, crashes, notRun, cancelled []int64
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
		notRun = append(notRun, s.NotRun)
		cancelled = append(cancelled, s.Cancelled)
		busy = append(busy, s.BusySeconds)
	}
	if len(names) == 0 && d.IsZero() {
		return nil
	}
	b := &pgx.Batch{}
	if len(names) > 0 {
		b.Queue(addStageStatsSQL, names, processed, failed, timeouts, crashes, notRun, cancelled, busy, db.writer)
	}
	if !d.IsZero() {
		b.Queue(addDispatchStatsSQL, d.Claimed, d.StagePasses, d.Requeued, d.Done, d.Failed, d.Paused, d.Resumed, d.Reset, d.Orphans, d.Expired, db.writer, d.Cancelled, d.Joined, d.JoinFailed)
	}
	return tx.SendBatch(ctx, b).Close()
}

// ReadStats returns every stage's totals (by name) and the global totals,
// each the sum of every writer's rows.
func (db *DB) ReadStats(ctx context.Context) ([]StageStats, DispatchStats, error) {
	var d DispatchStats
	rows, err := db.pool.Query(ctx, `SELECT stage, sum(processed)::bigint, sum(failed)::bigint, sum(timeouts)::bigint,
		sum(crashes)::bigint, sum(not_run)::bigint, sum(cancelled)::bigint, sum(busy_seconds), max(updated_at)
		FROM pepsi.stage_stats GROUP BY stage ORDER BY stage`)
	if err != nil {
		return nil, d, err
	}
	stages, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StageStats, error) {
		var s StageStats
		err := r.Scan(&s.Stage, &s.Processed, &s.Failed, &s.Timeouts, &s.Crashes, &s.NotRun, &s.Cancelled, &s.BusySeconds, &s.UpdatedAt)
		return s, err
	})
	if err != nil {
		return nil, d, err
	}
	err = db.pool.QueryRow(ctx, `SELECT coalesce(sum(claimed), 0)::bigint, coalesce(sum(stage_passes), 0)::bigint,
		coalesce(sum(requeued), 0)::bigint, coalesce(sum(done), 0)::bigint, coalesce(sum(failed), 0)::bigint,
		coalesce(sum(paused), 0)::bigint, coalesce(sum(resumed), 0)::bigint, coalesce(sum(reset), 0)::bigint,
		coalesce(sum(orphans), 0)::bigint, coalesce(sum(expired), 0)::bigint, coalesce(sum(cancelled), 0)::bigint,
		coalesce(sum(joined), 0)::bigint, coalesce(sum(join_failed), 0)::bigint, coalesce(max(updated_at), now())
		FROM pepsi.dispatch_stats`).Scan(&d.Claimed, &d.StagePasses, &d.Requeued, &d.Done, &d.Failed, &d.Paused, &d.Resumed,
		&d.Reset, &d.Orphans, &d.Expired, &d.Cancelled, &d.Joined, &d.JoinFailed, &d.UpdatedAt)
	return stages, d, err
}
