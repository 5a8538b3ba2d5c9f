package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// FlowKey is a stage's KEY and KEY_LIMIT, as pepsi.flow_keys holds them.
type FlowKey struct {
	Stage  string
	Header string // the header whose value is a message's key there
	Limit  int    // the most messages of one key in flight there
}

// flowKeySQL is the key messages with headers $2 have at stage $1 (no row
// or NULL: none).
const flowKeySQL = `SELECT pepsi.flow_key($2::jsonb ->> header) FROM pepsi.flow_keys WHERE stage = $1`

// flowLockTimeout bounds SetFlowKeys' wait for the ingress transactions
// that read pepsi.flow_keys: while it waits, new ones queue behind it.
const flowLockTimeout = 5 * time.Second

// SetFlowKeys makes pepsi.flow_keys say, for the stages given (the
// dispatcher's own), exactly keys (those of them that have KEY), and gives
// every unfinished message at a stage whose KEY changed its key there. It
// changes nothing, and takes no lock, when the table already says so, and
// returns which stages it re-keyed and how many rows.
//
// The new keys hold from its commit: it takes pepsi.flow_keys in ACCESS
// EXCLUSIVE mode, so an ingress or settle that read the old ones has
// committed before the re-keying reads the rows, and one that comes after
// reads the new ones.
func (db *DB) SetFlowKeys(ctx context.Context, stages []string, keys []FlowKey) (changed []string, rows int64, err error) {
	want := make(map[string]FlowKey, len(keys))
	for _, k := range keys {
		want[k.Stage] = k
	}
	have, err := db.flowKeys(ctx, stages)
	if err != nil {
		return nil, 0, err
	}
	for _, s := range stages {
		if have[s] != want[s] {
			changed = append(changed, s)
		}
	}
	if len(changed) == 0 {
		return nil, 0, nil
	}
	for try := 1; ; try++ {
		err = db.setFlowKeys(ctx, changed, want, &rows)
		if err == nil || try == flowLockTries || !isLockTimeout(err) {
			break
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("setting the stages' KEY (%s): %w", strings.Join(changed, ", "), DescribeConnect(err))
	}
	return changed, rows, nil
}

// flowLockTries is how many times SetFlowKeys waits flowLockTimeout.
const flowLockTries = 12

// isLockTimeout reports whether err is lock_timeout's.
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03" && strings.Contains(pe.Message, "lock timeout")
}

// setFlowKeys is one try of SetFlowKeys' transaction.
func (db *DB) setFlowKeys(ctx context.Context, changed []string, want map[string]FlowKey, rows *int64) error {
	return db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", flowLockTimeout.Milliseconds())); err != nil {
			return err
		}
		if f := db.fence.Load(); f != nil {
			if _, err := tx.Exec(ctx, fenceSQL, f.token, f.stages); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE pepsi.flow_keys IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM pepsi.flow_keys WHERE stage = ANY($1)", changed); err != nil {
			return err
		}
		for _, s := range changed {
			if k, ok := want[s]; ok {
				if _, err := tx.Exec(ctx, "INSERT INTO pepsi.flow_keys (stage, header, key_limit) VALUES ($1, $2, $3)", k.Stage, k.Header, k.Limit); err != nil {
					return err
				}
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE pepsi.state s SET flow_key = `+flowKeyHere+`
			WHERE s.stage = ANY($1) AND (s.status IN ('pending', 'running', 'held')
			      OR s.status = 'paused' AND (s.attempts > 0 OR s.flow_key IS NOT NULL))`, changed) // a scheduled message is keyed when due (resumeSQL)
		*rows = tag.RowsAffected()
		return err
	})
}

// flowKeys reads pepsi.flow_keys' rows for stages.
func (db *DB) flowKeys(ctx context.Context, stages []string) (map[string]FlowKey, error) {
	have := map[string]FlowKey{}
	err := Retry(ctx, func() error {
		clear(have)
		rows, err := db.pool.Query(ctx, "SELECT stage, header, key_limit FROM pepsi.flow_keys WHERE stage = ANY($1)", stages)
		if err != nil {
			return err
		}
		var k FlowKey
		_, err = pgx.ForEachRow(rows, []any{&k.Stage, &k.Header, &k.Limit}, func() error {
			have[k.Stage] = k
			return nil
		})
		return err
	})
	return have, err
}

// FlowKeys returns every keyed stage pepsi.flow_keys names, by stage.
func (db *DB) FlowKeys(ctx context.Context) ([]FlowKey, error) {
	var out []FlowKey
	err := Retry(ctx, func() error {
		rows, err := db.pool.Query(ctx, "SELECT stage, header, key_limit FROM pepsi.flow_keys ORDER BY stage")
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[FlowKey])
		return err
	})
	return out, err
}
