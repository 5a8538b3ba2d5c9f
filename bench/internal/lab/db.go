package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The bench's own SQL, on its own pool (bench.sql): its tables (schema
// bench), the fixtures it puts straight into pepsi's tables, and what it
// reads back of them and of the server. What the product itself runs it
// runs through pkg/queue (bench.db) or pepsi's commands.

// ceilingSQL is the commit ceiling's transaction: one single-row UPDATE,
// each connection on its own row.
const ceilingSQL = "UPDATE bench.ceiling SET n = n + 1 WHERE id = $1"

// workSQL is a bench stage's work in its pass's transaction: the
// ceiling's statement on a table of its own (each worker on its row).
const workSQL = "UPDATE bench.work SET n = n + 1 WHERE id = $1"

// workRowSQL makes a bench stage's row.
const workRowSQL = "INSERT INTO bench.work (id) VALUES ($1) ON CONFLICT DO NOTHING"

// openSQL opens the bench's own pool on dsn.
func openSQL(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad DSN: %w", err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "pepsi bench fixtures"
	return pgxpool.NewWithConfig(ctx, cfg)
}

// createSchema adds the bench's tables: bench.work for its stages,
// bench.ceiling for the commit ceiling.
func (b *bench) createSchema(ctx context.Context) error {
	_, err := b.sql.Exec(ctx, `
CREATE SCHEMA bench;
CREATE TABLE bench.work (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
CREATE TABLE bench.ceiling (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`)
	return err
}

// seedCeiling makes the commit ceiling's rows 1..n.
func (b *bench) seedCeiling(ctx context.Context, n int) error {
	_, err := b.sql.Exec(ctx, "INSERT INTO bench.ceiling (id) SELECT generate_series(1, $1) ON CONFLICT DO NOTHING", n)
	return err
}

// serverSettings are the server settings the report names.
type serverSettings struct {
	Version, SynchronousCommit, Fsync, Autovacuum string
	MaxConnections                                int
}

// settings reads the server settings the report names.
func (b *bench) settings(ctx context.Context) (serverSettings, error) {
	var s serverSettings
	err := b.sql.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'),
		current_setting('fsync'), current_setting('autovacuum'), current_setting('max_connections')::int`).
		Scan(&s.Version, &s.SynchronousCommit, &s.Fsync, &s.Autovacuum, &s.MaxConnections)
	return s, err
}

// reset empties the queue between runs: it deletes every message, queued,
// finished or not yet admitted. A dispatcher may be running: its admission
// and retention sweep lock pepsi.state and pepsi.message in other orders
// than the TRUNCATE does, and a deadlock between them is retried.
func (b *bench) reset(ctx context.Context) error {
	var err error
	for range 5 {
		_, err = b.sql.Exec(ctx, "TRUNCATE pepsi.state, pepsi.message, pepsi.ingress")
		if err == nil || !pgerr.IsTransient(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// idle reports whether no message is pending, running or paused, or
// waits in pepsi.ingress to be admitted; each EXISTS on pepsi.state walks
// its partial index.
func (b *bench) idle(ctx context.Context) (bool, error) {
	var idle bool
	err := b.sql.QueryRow(ctx, `SELECT NOT (EXISTS (SELECT 1 FROM pepsi.state WHERE status = 'pending')
		OR EXISTS (SELECT 1 FROM pepsi.ingress)
		OR EXISTS (SELECT 1 FROM pepsi.state WHERE status = 'running')
		OR EXISTS (SELECT 1 FROM pepsi.state WHERE status = 'paused'))`).Scan(&idle)
	return idle, err
}

// notDoneFrom counts the messages from id first on that are not done, and
// describes one of them ("" when none).
func (b *bench) notDoneFrom(ctx context.Context, first int64) (n int64, example string, err error) {
	err = b.sql.QueryRow(ctx, `
		SELECT count(*), coalesce(min(status || ' at ' || stage || ': ' || coalesce(dispatch_error, error, '')), '')
		  FROM pepsi.state WHERE id >= $1 AND status <> 'done'`, first).Scan(&n, &example)
	return n, example, err
}

// spanFrom is the time from the first creation to the last change of the
// messages from id first on, by the server's clock.
func (b *bench) spanFrom(ctx context.Context, first int64) (time.Duration, error) {
	var secs float64
	err := b.sql.QueryRow(ctx, `
		SELECT extract(epoch FROM max(s.updated_at) - min(m.created_at))::float8
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id >= $1`, first).Scan(&secs)
	return time.Duration(secs * float64(time.Second)), err
}

// latencyFrom is the p50 and p99 of creation → last change of the
// messages from id first on, by the server's clock.
func (b *bench) latencyFrom(ctx context.Context, first int64) (p50, p99 time.Duration, err error) {
	var q []float64
	err = b.sql.QueryRow(ctx, `
		SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM s.updated_at - m.created_at)::float8)
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id >= $1`, first).Scan(&q)
	if err != nil || len(q) != 2 {
		return 0, 0, fmt.Errorf("latency percentiles: %v", err)
	}
	return time.Duration(q[0] * float64(time.Second)), time.Duration(q[1] * float64(time.Second)), nil
}

// backendPIDs lists the server processes of the database's client sessions.
func (b *bench) backendPIDs(ctx context.Context) ([]int, error) {
	rows, err := b.sql.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'")
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

// checkpoints counts the checkpoints the server has made.
func (b *bench) checkpoints(ctx context.Context) (int64, error) {
	var n int64
	err := b.sql.QueryRow(ctx, "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").Scan(&n)
	return n, err
}

// insertSelect enqueues n messages at stage with one INSERT … SELECT in
// the server: the database's own ceiling for enqueueing.
func (b *bench) insertSelect(ctx context.Context, n int, stage string) error {
	_, err := b.sql.Exec(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (payload) SELECT convert_to('message ' || i, 'UTF8') FROM generate_series(1, $1) i RETURNING id
)
INSERT INTO pepsi.state (id, stage) SELECT id, $2 FROM m`, n, stage)
	return err
}

// seedPending inserts pending messages from..to (by count) spread over
// stages s1..sK round-robin, and analyzes the tables.
func (b *bench) seedPending(ctx context.Context, from, to, stages int) error {
	_, err := b.sql.Exec(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (payload) SELECT '\x00'::bytea FROM generate_series($1::int, $2::int) RETURNING id
)
INSERT INTO pepsi.state (id, stage) SELECT id, 's' || (id % $3 + 1) FROM m`, from, to, stages)
	if err != nil {
		return err
	}
	_, err = b.sql.Exec(ctx, "VACUUM (ANALYZE) pepsi.message, pepsi.state")
	return err
}

// enqueueWithKeys enqueues n messages at stage whose header customer takes
// keys values round robin, keyed as pepsi.enqueue keys them, in one statement,
// and returns the first id.
func (b *bench) enqueueWithKeys(ctx context.Context, n, keys int, stage string) (int64, error) {
	var first int64
	err := b.sql.QueryRow(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (headers, payload)
    SELECT jsonb_build_object('customer', 'c' || i % $2), 'bench' FROM generate_series(1, $1) i RETURNING id, headers
), s AS (
    INSERT INTO pepsi.state (id, stage, flow_key)
    SELECT id, $3, headers ->> (SELECT header FROM pepsi.flow_keys WHERE stage = $3) FROM m RETURNING id
)
SELECT min(id) FROM s`, n, keys, stage).Scan(&first)
	return first, err
}

// seedKeyed inserts n pending messages at stage with keys keys round robin
// (as enqueueWithKeys, but keyed whatever pepsi.flow_keys says), and
// analyzes the tables.
func (b *bench) seedKeyed(ctx context.Context, n, keys int, stage string) error {
	_, err := b.sql.Exec(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (headers, payload)
    SELECT jsonb_build_object('customer', 'c' || i % $2), '\x00'::bytea FROM generate_series(1, $1) i RETURNING id, headers
)
INSERT INTO pepsi.state (id, stage, flow_key) SELECT id, $3, headers ->> 'customer' FROM m`, n, keys, stage)
	if err != nil {
		return err
	}
	_, err = b.sql.Exec(ctx, "VACUUM (ANALYZE) pepsi.message, pepsi.state")
	return err
}

// errRollback ends timeClaim's transaction.
var errRollback = errors.New("rolled back")

// timeClaim runs the dispatcher's claim for caps (on its generic plan, as
// the dispatcher runs it) in a transaction that it rolls
// back, so that the pending set stays as it was, and returns how
// many rows the claim took and how long it ran.
func (b *bench) timeClaim(ctx context.Context, caps []queue.StageCap) (int, time.Duration, error) {
	var n int
	var took time.Duration
	err := pgx.BeginFunc(ctx, b.sql, func(tx pgx.Tx) error {
		if err := queue.GenericPlans(ctx, tx); err != nil {
			return err
		}
		start := time.Now()
		got, err := queue.Claim(ctx, tx, caps, nil)
		took, n = time.Since(start), len(got)
		if err != nil {
			return err
		}
		return errRollback
	})
	if errors.Is(err, errRollback) {
		err = nil
	}
	return n, took, err
}
