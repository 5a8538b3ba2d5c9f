package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TimeClaim runs the claim for caps in a transaction that it rolls back,
// so that the pending set stays as it was, and returns how many rows the
// claim took and how long its statement ran. For benchmarks (pepsi bench).
func (db *DB) TimeClaim(ctx context.Context, caps []StageCap) (int, time.Duration, error) {
	args, ok := claimArgs(caps)
	if !ok {
		return 0, 0, nil
	}
	var n int
	var took time.Duration
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		start := time.Now()
		rows, err := tx.Query(ctx, claimSQL, args...)
		got, _, err := scanClaimed(rows, err, nil, nil)
		took, n = time.Since(start), len(got)
		if err != nil {
			return err
		}
		return errRollback
	})
	if err == errRollback {
		err = nil
	}
	return n, took, err
}

type rollback struct{}

func (rollback) Error() string { return "rolled back" }

var errRollback error = rollback{}

// The statements of pepsi bench (pkg/bench): its own tables, what it
// measures the database with, and what it reads back.

// BenchCeilingSQL is the commit ceiling's transaction: one single-row
// UPDATE, each connection on its own row.
const BenchCeilingSQL = "UPDATE bench.ceiling SET n = n + 1 WHERE id = $1"

// BenchWorkSQL is a bench stage's work in its pass's transaction: the
// ceiling's statement on a table of its own (each worker on its row).
const BenchWorkSQL = "UPDATE bench.work SET n = n + 1 WHERE id = $1"

// BenchWorkRowSQL makes a bench stage's row.
const BenchWorkRowSQL = "INSERT INTO bench.work (id) VALUES ($1) ON CONFLICT DO NOTHING"

// CreateBenchSchema adds pepsi bench's tables: bench.work for its stages,
// bench.ceiling for the commit ceiling.
func (db *DB) CreateBenchSchema(ctx context.Context) error {
	_, err := db.Pool.Exec(ctx, `
CREATE SCHEMA bench;
CREATE TABLE bench.work (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
CREATE TABLE bench.ceiling (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`)
	return err
}

// SeedCeiling makes the commit ceiling's rows 1..n.
func (db *DB) SeedCeiling(ctx context.Context, n int) error {
	_, err := db.Pool.Exec(ctx, "INSERT INTO bench.ceiling (id) SELECT generate_series(1, $1) ON CONFLICT DO NOTHING", n)
	return err
}

// ServerSettings are the server settings a benchmark report names.
type ServerSettings struct {
	Version, SynchronousCommit, Fsync, Autovacuum string
	MaxConnections                                int
}

// Settings reads the server settings a benchmark report names.
func (db *DB) Settings(ctx context.Context) (ServerSettings, error) {
	var s ServerSettings
	err := db.Pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'),
		current_setting('fsync'), current_setting('autovacuum'), current_setting('max_connections')::int`).
		Scan(&s.Version, &s.SynchronousCommit, &s.Fsync, &s.Autovacuum, &s.MaxConnections)
	return s, err
}

// Empty deletes every message.
func (db *DB) Empty(ctx context.Context) error {
	_, err := db.Pool.Exec(ctx, "TRUNCATE pepsi.state, pepsi.message")
	return err
}

// Idle reports whether no message is pending, running or paused; each
// EXISTS walks its partial index.
func (db *DB) Idle(ctx context.Context) (bool, error) {
	var idle bool
	err := db.Pool.QueryRow(ctx, `SELECT NOT (EXISTS (SELECT 1 FROM pepsi.state WHERE status = 'pending')
		OR EXISTS (SELECT 1 FROM pepsi.state WHERE status = 'running')
		OR EXISTS (SELECT 1 FROM pepsi.state WHERE status = 'paused'))`).Scan(&idle)
	return idle, err
}

// NotDoneFrom counts the messages from id first on that are not done, and
// describes one of them ("" when none).
func (db *DB) NotDoneFrom(ctx context.Context, first int64) (n int64, example string, err error) {
	err = db.Pool.QueryRow(ctx, `
		SELECT count(*), coalesce(min(status || ' at ' || stage || ': ' || coalesce(dispatch_error, error, '')), '')
		  FROM pepsi.state WHERE id >= $1 AND status <> 'done'`, first).Scan(&n, &example)
	return n, example, err
}

// SpanFrom is the time from the first creation to the last change of the
// messages from id first on, by the server's clock.
func (db *DB) SpanFrom(ctx context.Context, first int64) (time.Duration, error) {
	var secs float64
	err := db.Pool.QueryRow(ctx, `
		SELECT extract(epoch FROM max(s.updated_at) - min(m.created_at))::float8
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id >= $1`, first).Scan(&secs)
	return time.Duration(secs * float64(time.Second)), err
}

// LatencyFrom is the p50 and p99 of creation → last change of the
// messages from id first on, by the server's clock.
func (db *DB) LatencyFrom(ctx context.Context, first int64) (p50, p99 time.Duration, err error) {
	var q []float64
	err = db.Pool.QueryRow(ctx, `
		SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM s.updated_at - m.created_at)::float8)
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id >= $1`, first).Scan(&q)
	if err != nil || len(q) != 2 {
		return 0, 0, fmt.Errorf("latency percentiles: %v", err)
	}
	return time.Duration(q[0] * float64(time.Second)), time.Duration(q[1] * float64(time.Second)), nil
}

// BackendPIDs lists the server processes of the database's client sessions.
func (db *DB) BackendPIDs(ctx context.Context) ([]int, error) {
	rows, err := db.Pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'")
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, err
}

// Checkpoints counts the checkpoints the server has made.
func (db *DB) Checkpoints(ctx context.Context) (int64, error) {
	var n int64
	err := db.Pool.QueryRow(ctx, "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").Scan(&n)
	return n, err
}

// InsertSelect enqueues n messages at stage with one INSERT … SELECT in the
// server: the database's own ceiling for enqueueing.
func (db *DB) InsertSelect(ctx context.Context, n int, stage string) error {
	_, err := db.Pool.Exec(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (payload) SELECT convert_to('message ' || i, 'UTF8') FROM generate_series(1, $1) i RETURNING id
)
INSERT INTO pepsi.state (id, stage) SELECT id, $2 FROM m`, n, stage)
	return err
}

// SeedPending inserts pending messages from..to (by count) spread over
// stages s1..sK round-robin, and analyzes the tables.
func (db *DB) SeedPending(ctx context.Context, from, to, stages int) error {
	_, err := db.Pool.Exec(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (payload) SELECT '\x00'::bytea FROM generate_series($1::int, $2::int) RETURNING id
)
INSERT INTO pepsi.state (id, stage) SELECT id, 's' || (id % $3 + 1) FROM m`, from, to, stages)
	if err != nil {
		return err
	}
	_, err = db.Pool.Exec(ctx, "VACUUM (ANALYZE) pepsi.message, pepsi.state")
	return err
}

// EnqueueOne enqueues one empty message at stage through the SQL API
// (pepsi.enqueue) on conn, as an application would, and returns its id.
func EnqueueOne(ctx context.Context, conn *pgx.Conn, stage string) (int64, error) {
	var id int64
	err := conn.QueryRow(ctx, "SELECT pepsi.enqueue($1, ''::bytea, '{}'::jsonb)", stage).Scan(&id)
	return id, err
}
