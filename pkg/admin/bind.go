package admin

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Binding a bulk action to what its confirmation counted (issue 54): the
// dashboard reads, at the confirmation, the ids of the messages the
// action would change (BindSelection), and acts later on those ids alone,
// each one only if it still matches the selection (Within): a message
// enqueued meanwhile is not among them, and one that changed meanwhile
// (finished, moved on, taken by a dispatcher) no longer matches and is
// left alone.

// BindSelection returns the ids of the messages of sel whose status is one
// of sts, in id order, at most limit of them (more says there are more):
// what a change of those statuses would change now. Running messages are
// among them only at stages no dispatcher owns, unless anyRunning (a
// forced cancel takes them all), as the change decides.
func (db *DB) BindSelection(ctx context.Context, sel Selection, sts []queue.Status, anyRunning bool, limit int) (ids []int64, more bool, err error) {
	if sel.Status != "" {
		sts = slices.DeleteFunc(slices.Clone(sts), func(s queue.Status) bool { return s != sel.Status })
	}
	if len(sts) == 0 {
		return nil, false, nil
	}
	if err := db.resolve(ctx, &sel.Search); err != nil {
		return nil, false, err
	}
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		if err := limitSearch(ctx, tx, &sel.Search); err != nil {
			return err
		}
		free := true
		if slices.Contains(sts, queue.Running) && !anyRunning {
			var err error
			if free, err = takeShared(ctx, tx); err != nil {
				return err
			}
		}
		var st statement
		conds, err := sel.conds(st.arg)
		if err != nil {
			return err
		}
		conds = append(conds, "status = ANY("+st.arg(statusText(sts))+"::text[])")
		if !anyRunning {
			conds = append(conds, "(status <> 'running' OR ("+st.arg(free)+" AND "+freeStage+"))")
		}
		rows, err := tx.Query(ctx, "SELECT id FROM pepsi.state"+whereOf(conds)+" ORDER BY id LIMIT "+st.arg(limit+1), st.args...)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return nil, false, searchErr(ctx, err)
	}
	if len(ids) > limit {
		return ids[:limit], true, nil
	}
	return ids, false, nil
}

// Within returns sel narrowed to the messages ids (sorted, as
// BindSelection returns them), without its time bounds (its age and its
// search's window, which held when the ids were read and would have moved
// since): what is left of a bound selection when it is acted on.
func (s Selection) Within(ids []int64) Selection {
	s.IDs = ids
	s.OlderThan, s.NewerThan = 0, 0
	s.Search.Since = 0
	s.Search.from = 0
	if len(ids) > 0 && s.Search.searches() {
		// resolved: the ids are the window
		s.Search.from = slices.Min(ids)
	}
	return s
}

// Unmatched counts the messages of sel.IDs that no longer match sel, by
// their status now, and those that no longer exist: what an action on a
// bound selection leaves alone for having changed since it was bound.
func (db *DB) Unmatched(ctx context.Context, sel Selection) (map[queue.Status]int64, int64, error) {
	out := map[queue.Status]int64{}
	if len(sel.IDs) == 0 {
		return out, 0, nil
	}
	if err := db.resolve(ctx, &sel.Search); err != nil {
		return nil, 0, err
	}
	var st statement
	conds, err := sel.conds(st.arg)
	if err != nil {
		return nil, 0, err
	}
	ids := st.arg(sel.IDs)
	match := "true"
	if len(conds) > 0 {
		match = strings.Join(conds, " AND ")
	}
	var found int64
	err = db.read(ctx, &sel.Search, func(q querier) error {
		rows, err := q.Query(ctx, "SELECT status, count(*), count(*) FILTER (WHERE NOT coalesce("+match+", false)) FROM pepsi.state WHERE id = ANY("+ids+"::bigint[]) GROUP BY status", st.args...)
		if err != nil {
			return err
		}
		var status string
		var n, off int64
		_, err = pgx.ForEachRow(rows, []any{&status, &n, &off}, func() error {
			found += n
			if off > 0 {
				out[queue.Status(status)] = off
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, 0, searchErr(ctx, err)
	}
	return out, max(int64(len(uniqueIDs(sel.IDs)))-found, 0), nil
}
