package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pass is one failed pass of a message, as pepsi.history recorded it when
// the dispatcher settled it.
type Pass struct {
	N       int       `json:"n"` // the message's failed passes, counted from 1
	At      time.Time `json:"at"`
	Stage   string    `json:"stage"`
	Attempt int       `json:"attempt"` // the message's attempts at the stage then
	Kind    string    `json:"kind"`    // answer, crash, timeout or protocol
	Reason  string    `json:"reason"`
	PID     *int32    `json:"pid,omitempty"`  // the worker's process id
	Host    *string   `json:"host,omitempty"` // the host of the dispatcher that ran it
}

// History returns the failed passes pepsi.history keeps of message id
// (its last queue.HistoryKeep), oldest first; none for a message that
// never failed a pass or does not exist.
func (db *DB) History(ctx context.Context, id int64) ([]Pass, error) {
	rows, err := db.pool.Query(ctx, `SELECT n, at, stage, attempt, kind, reason, pid, host
		  FROM pepsi.history WHERE id = $1 ORDER BY n`, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pass, error) {
		var p Pass
		err := r.Scan(&p.N, &p.At, &p.Stage, &p.Attempt, &p.Kind, &p.Reason, &p.PID, &p.Host)
		return p, err
	})
}
