package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// admitMost bounds one Admit: producers that enqueue as fast as it admits
// do not keep it going; a dispatcher admits the rest.
const admitMost = 1000 * AdmitBatch

// Admit moves every message waiting in pepsi.ingress (what pepsi.enqueue()
// wrote and no dispatcher has admitted yet) to pending at its stage, as a
// dispatcher does at each poll, and returns how many it moved (at most a
// million). Readers of pepsi.state call it first, so that they see every
// message enqueued before. Messages another session is admitting at that
// moment are left to it.
func (db *DB) Admit(ctx context.Context) (int64, error) {
	var total int64
	for total < admitMost {
		var n int64
		err := Retry(ctx, func() error {
			return db.pool.QueryRow(ctx, admitSQL, AdmitBatch).Scan(&n)
		})
		if err != nil {
			return total, fmt.Errorf("admit enqueued messages: %w", err)
		}
		total += n
		if n < AdmitBatch {
			return total, nil
		}
	}
	return total, nil
}

// Enqueued counts the messages waiting in pepsi.ingress per stage:
// enqueued, not yet admitted. A session that may not admit them (see
// MayNotWrite) shows them so.
func (db *DB) Enqueued(ctx context.Context) (map[string]int64, error) {
	rows, err := db.pool.Query(ctx, `SELECT stage, count(*) FROM pepsi.ingress GROUP BY stage`)
	if err != nil {
		return nil, fmt.Errorf("count enqueued messages: %w", err)
	}
	n := map[string]int64{}
	var stage string
	var c int64
	_, err = pgx.ForEachRow(rows, []any{&stage, &c}, func() error {
		n[stage] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count enqueued messages: %w", err)
	}
	return n, nil
}
