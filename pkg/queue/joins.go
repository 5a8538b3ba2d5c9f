package queue

import (
	"context"
	"slices"
)

// joinsSQL settles the joins of messages $1 (pepsi.joins, in
// sql/functions/30_graph.sql): each waiting parent with no open child is
// released, pending at its join stage; at a stage not in $2 (JOIN_POLICY
// = all) one with a failed child fails. It runs after the settle, in its
// transaction, as a statement of its own: the rows the settle ended are
// seen ended, and the parents are locked before they are read again.
const joinsSQL = `SELECT id, stage, failed FROM pepsi.joins($1::bigint[], $2::text[])`

// joinIDs returns the messages whose joins a turn settles after its
// settle: the parents of its verdicts, the messages its verdicts move to a
// join, and t.Joins; nil when there are none, which is every turn of a
// pipeline without children.
func joinIDs(t Turn) []int64 {
	var ids []int64
	for i := range t.Settles {
		v := &t.Settles[i]
		if v.Parent != 0 {
			ids = append(ids, v.Parent)
		}
		if v.Verdict == Join {
			ids = append(ids, v.ID)
		}
	}
	if ids == nil && len(t.Joins) == 0 {
		return nil
	}
	ids = append(ids, t.Joins...)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// sweepJoinsSQL finds waiting parents whose join is due and settles them:
// no child open, or (at a stage not in $1) a child failed. It catches what
// a settle's joins could not see: a dispatcher killed between a settle and
// the next, a parent that a stage moved to its join with pepsi.join as its
// last child ended.
const sweepJoinsSQL = `
SELECT coalesce(array_agg(j.id), '{}'), coalesce(array_agg(j.stage), '{}'), coalesce(array_agg(j.failed), '{}') FROM pepsi.joins(ARRAY(
    SELECT s.id FROM pepsi.state_live s
     WHERE s.status = 'waiting' AND s.handed IS NULL
       AND (NOT EXISTS (SELECT FROM pepsi.state_live c WHERE c.parent = s.id)
            OR NOT (s.stage = ANY ($1::text[])) AND EXISTS (SELECT FROM pepsi.state_failed c WHERE c.parent = s.id))
     ORDER BY s.id LIMIT 1000), $1::text[]) j`

// SweepJoins settles the joins that are due and were not settled (see
// sweepJoinsSQL), and returns the parents it released or failed. all are the stages
// whose JOIN_POLICY is all.
func (db *DB) SweepJoins(ctx context.Context, all []string) ([]Joined, error) {
	if all == nil {
		all = []string{}
	}
	var ids []int64
	var stages []string
	var failed []bool
	err := Retry(ctx, func() error {
		return db.queryRowFenced(ctx, sweepJoinsSQL, []any{all}, &ids, &stages, &failed)
	})
	out := make([]Joined, len(ids))
	for i := range ids {
		out[i] = Joined{ID: ids[i], Stage: stages[i], Failed: failed[i]}
	}
	return out, err
}
