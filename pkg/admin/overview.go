package admin

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The dashboard's overview counts the queue in two parts: every status but
// done (the partitions of live and failed work, small in a healthy queue,
// and what says whether something is wrong), often; and done (by far the
// largest partition, and the one that says least), seldom.

// StageCount is how many messages of one stage are in one status, and
// when the oldest of them was last updated.
type StageCount struct {
	Stage  string       `json:"stage"`
	Status queue.Status `json:"status"`
	N      int64        `json:"n"`
	Oldest time.Time    `json:"oldest"`
	// HandedAt is, for running messages, the stage whose dispatcher holds
	// them: the one they were handed out at (pepsi.state.handed, else
	// their stage; see Redrive). "" for the other statuses.
	HandedAt string `json:"handed_at,omitempty"`
}

// liveCountsSQL counts every status but done by stage (done's partitions
// are pruned), running messages also by the stage they were handed out at;
// messages pepsi.enqueue() wrote and no one has admitted yet count as
// pending at their stage, since their enqueue (as Counts does). Failed
// messages, which are kept until retried or purged and grow to a partition
// as large as the live one, are not read: their count is the failure
// groups' (pepsi.failure_groups and its deltas, sql/028_failure_groups.sql,
// exact), and when the oldest of them failed one probe of
// state_failed_group_at a group.
const liveCountsSQL = `
SELECT stage, status, CASE WHEN status = 'running' THEN ` + queue.HandedAt + ` ELSE '' END,
       count(*), min(updated_at)
  FROM pepsi.state WHERE status NOT IN ('done', 'failed')
 GROUP BY 1, 2, 3
UNION ALL
SELECT g.stage, 'failed', '', sum(g.n)::bigint, min(o.updated_at)
  FROM ` + failureCountsSQL + ` g
 CROSS JOIN LATERAL (SELECT updated_at FROM pepsi.state_failed
                      WHERE stage = g.stage AND (` + reasonSQL + ` COLLATE "C") = g.reason
                      ORDER BY updated_at LIMIT 1) o
 GROUP BY g.stage
UNION ALL
SELECT stage, 'pending', '', count(*), min(created_at) FROM pepsi.ingress GROUP BY stage`

// LiveCounts returns the number of messages per stage and status for every
// status but done (see StageCount), with the server's clock at the count.
// Pending counts may come in two parts (pepsi.state and pepsi.ingress).
func (db *DB) LiveCounts(ctx context.Context) ([]StageCount, time.Time, error) {
	now, err := db.Now(ctx)
	if err != nil {
		return nil, now, err
	}
	rows, err := db.pool.Query(ctx, liveCountsSQL)
	if err != nil {
		return nil, now, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StageCount, error) {
		var c StageCount
		var st string
		err := r.Scan(&c.Stage, &st, &c.HandedAt, &c.N, &c.Oldest)
		c.Status = queue.Status(st)
		return c, err
	})
	return out, now, err
}

// DoneCounts returns the number of done messages per stage. It reads every
// done message, hashed by stage: without the tables' statistics the
// planner guessed a few thousand rows and sorted millions on disk (2.7 s
// for 4.7 million, against 0.6 s hashed), so the sort is off for it.
func (db *DB) DoneCounts(ctx context.Context) (map[string]int64, error) {
	var out map[string]int64
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('enable_sort', 'off', true)"); err != nil {
			return err
		}
		var err error
		out, err = perStage(ctx, tx, `SELECT stage, count(*) FROM pepsi.state WHERE status = 'done' GROUP BY stage`)
		return err
	})
	return out, err
}

// perStage runs query, whose rows are a stage and a number, and returns
// the numbers by stage.
func perStage(ctx context.Context, q querier, query string) (map[string]int64, error) {
	rows, err := q.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var stage string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&stage, &n}, func() error {
		out[stage] = n
		return nil
	})
	return out, err
}
