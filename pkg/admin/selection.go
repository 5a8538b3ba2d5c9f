package admin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The dashboard's bulk actions: a retry or a purge of the messages an
// operator picked on a list, by ticking them or by taking every message
// that matches the list's filters. They keep Redrive's and Purge's rules
// (the same statements, batches of DefaultBatch rows each in its own
// transaction, and running rows left alone while a dispatcher holds them),
// with every filter of Browse.

// Selection is messages picked on a list: the IDs ticked, or every message
// matching the filters (Browse's, without its paging), or both (the ticked
// ones that still match). The zero Selection is every message.
type Selection struct {
	IDs       []int64
	Stage     string
	Status    queue.Status
	OlderThan time.Duration // last updated at least this long ago
	NewerThan time.Duration // last updated less than this long ago
	Text      string        // in the error or the dispatch_error, any case
	Reason    string        // in this failure group (see FoldReason)
	Parent    int64         // children of this message (0: any)
	Search                  // in the headers and payload, within a time bound
}

// SelectionRepair is what RedriveSelection or PurgeSelection did (or, with
// a dry run, would do).
type SelectionRepair struct {
	Repair
	// Skipped are messages of the selection the change does not apply to
	// for their status: pending ones for a retry (counted in Pending too),
	// live ones (pending, running, paused) for a purge.
	Skipped int64
	// Missing are ticked ids that no longer exist.
	Missing int64
}

// conds returns the selection's conditions on pepsi.state, adding their
// arguments with arg; an unknown status is an error.
func (s Selection) conds(arg func(any) string) ([]string, error) {
	var where []string
	if len(s.IDs) > 0 {
		where = append(where, "id = ANY("+arg(s.IDs)+"::bigint[])")
	}
	if s.Stage != "" {
		where = append(where, "stage = "+arg(s.Stage))
	}
	if s.Status != "" {
		if !slices.Contains(queue.Statuses, s.Status) {
			return nil, fmt.Errorf("unknown status %q", s.Status)
		}
		// A literal, as Browse writes it, for the partial indexes.
		where = append(where, statusIs(s.Status))
	}
	if s.OlderThan > 0 {
		where = append(where, "updated_at <= now() - "+arg(s.OlderThan)+"::interval")
	}
	if s.NewerThan > 0 {
		where = append(where, "updated_at > now() - "+arg(s.NewerThan)+"::interval")
	}
	if s.Text != "" {
		// ILIKE, a strict operator: rows without errors (most of them)
		// cost nothing, and the planner reads the live and done rows
		// with one from state_live_erred and state_done_erred (schema 20).
		pat := arg("%" + likeEscaper.Replace(s.Text) + "%")
		where = append(where, "(error ILIKE "+pat+" OR dispatch_error ILIKE "+pat+")")
	}
	switch {
	case s.Reason != "" && s.Status == queue.Failed:
		// The expression of state_failed_group, whose entries of the
		// group are the rows, in id order (schema 28).
		where = append(where, reasonSQL+" = "+arg(s.Reason))
	case s.Reason != "":
		where = append(where, reasonIs(s.Reason, arg))
	}
	if s.Parent > 0 {
		where = append(where, "parent = "+arg(s.Parent)) // state_parent
	}
	return append(where, s.Search.conds(arg)...), nil
}

// statusIs is the condition that a row is in status, with the status as a
// literal, as Browse writes it, for the partial indexes.
func statusIs(st queue.Status) string { return "status = '" + string(st) + "'" }

// ownPartition is the partition of pepsi.state that holds the rows of st
// and no others (failed, cancelled), "" for the other statuses. A
// statement on it needs no test of the status, whose selectivity the
// planner guesses (0.5 %) while the table has no statistics: it read
// every failed message for a page of 50 (119 ms at 100 000 of them),
// where the primary key's order reads 50.
func ownPartition(st queue.Status) string {
	switch st {
	case queue.Failed, queue.Cancelled:
		return "pepsi.state_" + string(st)
	}
	return ""
}

// statement collects the arguments of a statement built on a selection.
type statement struct {
	args []any
}

func (st *statement) arg(v any) string {
	st.args = append(st.args, v)
	return "$" + strconv.Itoa(len(st.args))
}

func whereOf(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// CountSelection counts the messages of sel, up to limit (0: all of
// them); more says there are more than limit.
func (db *DB) CountSelection(ctx context.Context, sel Selection, limit int64) (n int64, more bool, err error) {
	if err := db.resolve(ctx, &sel.Search); err != nil {
		return 0, false, err
	}
	var st statement
	conds, err := sel.conds(st.arg)
	if err != nil {
		return 0, false, err
	}
	sql := "SELECT count(*) FROM pepsi.state" + whereOf(conds)
	if limit > 0 {
		sql = "SELECT count(*) FROM (SELECT 1 FROM pepsi.state" + whereOf(conds) + " LIMIT " + st.arg(limit+1) + ") s"
	}
	err = db.read(ctx, &sel.Search, func(q querier) error {
		// A plan for the values given, as Browse's (see there).
		return q.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, st.args...)...).Scan(&n)
	})
	if err != nil {
		return 0, false, err
	}
	if limit > 0 && n > limit {
		return limit, true, nil
	}
	return n, false, nil
}

// RedriveSelection puts the failed, paused, done and (at stages no
// dispatcher owns) running messages of sel back to pending, as Redrive
// does: at toStage when it is set, with priority when it is not nil, their
// timeout, attempts and errors cleared, and wakes the dispatcher. Pending
// messages of sel are left alone and counted. With dryRun it counts.
func (db *DB) RedriveSelection(ctx context.Context, sel Selection, toStage string, priority *int32, dryRun bool) (SelectionRepair, error) {
	sts := redrivable
	if sel.Status != "" {
		sts = slices.DeleteFunc(slices.Clone(sts), func(s queue.Status) bool { return s != sel.Status })
	}
	res, err := db.changeSelection(ctx, sel, sts, dryRun, func(tx pgx.Tx, ids []int64, _ *Repair) error {
		// The reasons the history lacks, kept before they are cleared, as Redrive does.
		if _, err := tx.Exec(ctx, keepReasonsSQL, ids, statusText(sts)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, redriveSQL, ids, toStage, statusText(sts), priority); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, notifySQL)
		return err
	})
	res.Pending = res.Skipped
	return res, err
}

// PurgeSelection deletes the done, failed and cancelled messages of sel,
// payload and all, with their unfinished descendants, as Purge does; the
// live ones (pending, running, paused, held, waiting) are left alone and
// counted in Skipped. With dryRun it counts (the messages of sel only).
func (db *DB) PurgeSelection(ctx context.Context, sel Selection, dryRun bool) (SelectionRepair, error) {
	sts := []queue.Status{queue.Done, queue.Failed, queue.Cancelled}
	if sel.Status != "" {
		sts = slices.DeleteFunc(sts, func(s queue.Status) bool { return s != sel.Status })
	}
	return db.changeSelection(ctx, sel, sts, dryRun, func(tx pgx.Tx, ids []int64, tree *Repair) error {
		return purgeIDs(ctx, tx, ids, tree)
	})
}

// changeSelection applies a change to the messages of sel whose status is
// one of sts, batch by batch in id order, each batch locked and changed in
// its own transaction (a row changed meanwhile is checked again once
// locked, and dropped when it no longer matches). Running rows are changed
// only at stages no dispatcher owns, as batches decides, and the others
// counted in Held. apply may count what else it did in its *Repair's
// Descendants and Cancelled, added to the result once its transaction
// commits. With dryRun it counts what it would change.
func (db *DB) changeSelection(ctx context.Context, sel Selection, sts []queue.Status, dryRun bool, apply func(pgx.Tx, []int64, *Repair) error) (SelectionRepair, error) {
	var res SelectionRepair
	if err := db.resolve(ctx, &sel.Search); err != nil {
		return res, err
	}
	if dryRun {
		return db.countSelection(ctx, sel, sts)
	}
	// What the change leaves alone, counted before: the rows it changes
	// leave the selection's statuses (a purge deletes them).
	if len(sts) < len(queue.Statuses) {
		var st statement
		conds, err := sel.conds(st.arg)
		if err != nil {
			return res, err
		}
		conds = append(conds, "NOT status = ANY("+st.arg(statusText(sts))+"::text[])")
		err = db.read(ctx, &sel.Search, func(q querier) error {
			return q.QueryRow(ctx, "SELECT count(*) FROM pepsi.state"+whereOf(conds), st.args...).Scan(&res.Skipped)
		})
		if err != nil {
			return res, err
		}
	}
	if len(sel.IDs) > 0 {
		var found int64
		if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1::bigint[])", sel.IDs).Scan(&found); err != nil {
			return res, err
		}
		res.Missing = max(int64(len(uniqueIDs(sel.IDs)))-found, 0)
	}
	running := slices.Contains(sts, queue.Running)
	held := false
	var last int64
	for len(sts) > 0 {
		var ids []int64
		var more Repair
		err := db.inTx(ctx, func(tx pgx.Tx) error {
			ids, more = nil, Repair{}
			if err := limitSearch(ctx, tx, &sel.Search); err != nil {
				return err
			}
			now := sts
			if running && !held {
				free, err := takeShared(ctx, tx)
				if err != nil {
					return err
				}
				held = !free
			}
			if held {
				now = slices.DeleteFunc(slices.Clone(sts), func(s queue.Status) bool { return s == queue.Running })
			}
			if len(now) == 0 {
				return nil
			}
			var st statement
			conds, err := sel.conds(st.arg)
			if err != nil {
				return err
			}
			conds = append(conds, "status = ANY("+st.arg(statusText(now))+"::text[])", "id > "+st.arg(last),
				"(status <> 'running' OR "+freeStage+")")
			rows, err := tx.Query(ctx, "SELECT id FROM pepsi.state"+whereOf(conds)+
				" ORDER BY id LIMIT "+strconv.Itoa(DefaultBatch)+" FOR UPDATE", st.args...)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil || len(ids) == 0 {
				return err
			}
			// The change itself is not a search: no time limit.
			if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = DEFAULT"); err != nil {
				return err
			}
			return apply(tx, ids, &more)
		})
		if err != nil {
			return res, searchErr(ctx, err)
		}
		if len(ids) == 0 {
			break
		}
		res.Changed += int64(len(ids))
		res.Descendants += more.Descendants
		res.Cancelled += more.Cancelled
		last = ids[len(ids)-1]
	}
	if !running {
		return res, nil
	}
	n, stage, err := db.heldOf(ctx, sel, held)
	if err != nil {
		return res, err
	}
	res.Held = n
	return res, db.holder(ctx, &res.Repair, stage)
}

// countSelection is changeSelection's dry run.
func (db *DB) countSelection(ctx context.Context, sel Selection, sts []queue.Status) (SelectionRepair, error) {
	var res SelectionRepair
	var found int64
	var heldAt *string
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if err := limitSearch(ctx, tx, &sel.Search); err != nil {
			return err
		}
		all := false
		if slices.Contains(sts, queue.Running) {
			free, err := takeShared(ctx, tx)
			if err != nil {
				return err
			}
			all = !free
		}
		var st statement
		conds, err := sel.conds(st.arg)
		if err != nil {
			return err
		}
		in := "status = ANY(" + st.arg(statusText(sts)) + "::text[])"
		isHeld := "status = 'running' AND (" + st.arg(all) + " OR NOT " + freeStage + ")"
		return tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE `+in+` AND NOT (`+isHeld+`)),
		       count(*) FILTER (WHERE `+in+` AND `+isHeld+`),
		       min(`+queue.HandedAt+`) FILTER (WHERE `+in+` AND `+isHeld+`),
		       count(*) FILTER (WHERE NOT `+in+`), count(*)
		  FROM pepsi.state`+whereOf(conds), st.args...).Scan(&res.Changed, &res.Held, &heldAt, &res.Skipped, &found)
	})
	if err != nil {
		return res, searchErr(ctx, err)
	}
	if len(sel.IDs) > 0 {
		res.Missing = max(int64(len(uniqueIDs(sel.IDs)))-found, 0)
	}
	stage := ""
	if heldAt != nil {
		stage = *heldAt
	}
	return res, db.holder(ctx, &res.Repair, stage)
}

// heldOf counts the running rows of sel at stages a dispatcher owns (all:
// every one, a dispatcher without a stage set runs), and names one of
// those stages.
func (db *DB) heldOf(ctx context.Context, sel Selection, all bool) (int64, string, error) {
	var n int64
	var stage *string
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if err := limitSearch(ctx, tx, &sel.Search); err != nil {
			return err
		}
		var st statement
		conds, err := sel.conds(st.arg)
		if err != nil {
			return err
		}
		conds = append(conds, "status = 'running'", "("+st.arg(all)+" OR NOT "+freeStage+")")
		return tx.QueryRow(ctx, "SELECT count(*), min("+queue.HandedAt+") FROM pepsi.state"+whereOf(conds), st.args...).Scan(&n, &stage)
	})
	err = searchErr(ctx, err)
	if stage == nil {
		return n, "", err
	}
	return n, *stage, err
}

// uniqueIDs returns ids sorted, without repeats.
func uniqueIDs(ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// SelectionIDs returns the ids of the messages of sel in id order, at
// most limit of them; more says there are more. For a change that takes
// ids (Hold, Release, Cancel) of a selection it cannot take itself.
func (db *DB) SelectionIDs(ctx context.Context, sel Selection, limit int) (ids []int64, more bool, err error) {
	if err := db.resolve(ctx, &sel.Search); err != nil {
		return nil, false, err
	}
	var st statement
	conds, err := sel.conds(st.arg)
	if err != nil {
		return nil, false, err
	}
	err = db.read(ctx, &sel.Search, func(q querier) error {
		rows, err := q.Query(ctx, "SELECT id FROM pepsi.state"+whereOf(conds)+" ORDER BY id LIMIT "+st.arg(limit+1), st.args...)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if len(ids) > limit {
		return ids[:limit], true, nil
	}
	return ids, false, nil
}
