package admin

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Pass is one failed pass of a message, as pepsi.history recorded it when
// the dispatcher settled it.
type Pass struct {
	N       int       `json:"n"` // the message's failed passes, counted from 1
	At      time.Time `json:"at"`
	Stage   string    `json:"stage"`
	Attempt int       `json:"attempt"` // the message's attempts at the stage then
	Kind    string    `json:"kind"`    // answer, crash, timeout, protocol or fail (KindFail)
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

// KindFail is the kind of a history row that keeps a stage's pepsi.fail()
// reason (the message's error), written when a retry clears it.
const KindFail = "fail"

// keepReasonsSQL writes to pepsi.history, before a retry clears them, the
// reasons of the rows redriveSQL is about to redrive ($1: the ids, $2 the
// statuses it takes; running rows only at stages no dispatcher owns) that
// the history does not hold: a dispatch_error that is not the reason of
// the message's last row (a stage that answered 0 without moving it, an
// answer 75 with a reason, a failure from before schema 19) as kind
// answer, then the error of a failed message (its stage's pepsi.fail()
// reason) as kind fail. Each is dated when the row was last updated (when
// it failed), at the stage it is at, with its attempts there, and no
// worker. The rows queue.HistoryKeep or more before a message's newest
// are deleted, as the settle's history statement does.
var keepReasonsSQL = `
WITH s AS (
    SELECT s.id, s.stage, s.attempts, s.updated_at, coalesce(h.n, 0) AS n,
           CASE WHEN s.dispatch_error IS NOT NULL AND left(s.dispatch_error, ` + reasonMax + `) IS DISTINCT FROM h.reason
                THEN left(s.dispatch_error, ` + reasonMax + `) END AS answer,
           CASE WHEN s.status = 'failed' AND s.error IS NOT NULL THEN left(s.error, ` + reasonMax + `) END AS fail
      FROM pepsi.state s
      LEFT JOIN LATERAL (SELECT h.n, h.reason FROM pepsi.history h WHERE h.id = s.id ORDER BY h.n DESC LIMIT 1) h ON true
     WHERE s.id = ANY($1::bigint[]) AND s.status = ANY($2::text[])
       AND (s.status <> 'running' OR ` + freeStage + `)
       AND (s.dispatch_error IS NOT NULL OR s.error IS NOT NULL)
), r AS (
    SELECT id, n + 1 AS n, updated_at, stage, attempts, 'answer' AS kind, answer AS reason FROM s WHERE answer IS NOT NULL
    UNION ALL
    SELECT id, n + 1 + (answer IS NOT NULL)::int, updated_at, stage, attempts, '` + KindFail + `', fail FROM s WHERE fail IS NOT NULL
), ins AS (
    INSERT INTO pepsi.history (id, n, at, stage, attempt, kind, reason)
    SELECT id, n, updated_at, stage, attempts, kind, reason FROM r
)
DELETE FROM pepsi.history h USING (SELECT id, max(n) AS n FROM r GROUP BY id) m
 WHERE h.id = m.id AND h.n <= m.n - ` + strconv.Itoa(queue.HistoryKeep)

// reasonMax is queue.HistoryReasonMax, for SQL.
var reasonMax = strconv.Itoa(queue.HistoryReasonMax)
