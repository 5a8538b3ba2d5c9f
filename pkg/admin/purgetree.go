package admin

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// A purge in a graph (schema 26). A purged message's unfinished
// descendants go with it: their work is for a message that is gone, and
// no join would ever read it. They are found through state_live.parent,
// at most pepsi.spawn_depth() levels down, and deleted too, but for the
// running ones, which a worker may be processing: those are cancelled (as
// pepsi.cancel's cascade does: their pass goes on, its outcome ignored)
// and kept, to be purged with the cancelled ones later. Finished
// descendants stay: they are purged by their own status, their parent
// column naming a message that is gone.
//
// A purged child may be the last open one its parent's join waited for:
// pepsi.joins() settles the joins of the purged messages' parents after
// the delete, in the same transaction, and releases those with no open
// child left.

// purgeTreeSQL locks the live descendants of $1 (not themselves in $1) and
// returns them with their status. A row that moves meanwhile is read again
// once locked (READ COMMITTED).
const purgeTreeSQL = `
WITH RECURSIVE tree (id, n) AS (
    SELECT c.id, 1 FROM pepsi.state_live c WHERE c.parent = ANY ($1::bigint[])
    UNION ALL
    SELECT c.id, t.n + 1 FROM tree t JOIN pepsi.state_live c ON c.parent = t.id WHERE t.n <= pepsi.spawn_depth()
)
SELECT s.id, s.status = 'running' FROM pepsi.state_live s
 WHERE s.id IN (SELECT id FROM tree) AND NOT s.id = ANY ($1::bigint[])
 ORDER BY s.id FOR UPDATE OF s`

// purgeCancelSQL cancels the running descendants of a purged message.
const purgeCancelSQL = `
UPDATE pepsi.state SET status = 'cancelled', error = 'cancelled: its parent was purged', timeout = NULL,
       updated_at = now(), ended = pass, ended_as = 'c'
 WHERE id = ANY ($1::bigint[]) AND status = 'running'`

// purgeSQL deletes messages, payload, state and history.
const purgeSQL = `DELETE FROM pepsi.message WHERE id = ANY($1::bigint[])`

// purgeParentsSQL are the parents of the messages about to be purged, but
// for those purged with them.
const purgeParentsSQL = `
SELECT coalesce(array_agg(DISTINCT parent), '{}') FROM pepsi.state
 WHERE id = ANY ($1::bigint[]) AND parent IS NOT NULL AND NOT parent = ANY ($1::bigint[])`

// purgeIDs deletes the messages ids and their unfinished descendants in
// tx (the running ones cancelled instead), settles the joins of their
// parents, and adds what it did to res.
func purgeIDs(ctx context.Context, tx pgx.Tx, ids []int64, res *Repair) error {
	var parents []int64
	if err := tx.QueryRow(ctx, purgeParentsSQL, ids).Scan(&parents); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, purgeTreeSQL, ids)
	if err != nil {
		return err
	}
	var gone, running []int64
	var id int64
	var isRunning bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &isRunning}, func() error {
		if isRunning {
			running = append(running, id)
		} else {
			gone = append(gone, id)
		}
		return nil
	}); err != nil {
		return err
	}
	if len(running) > 0 {
		tag, err := tx.Exec(ctx, purgeCancelSQL, running)
		if err != nil {
			return err
		}
		res.Cancelled += tag.RowsAffected()
	}
	if _, err := tx.Exec(ctx, purgeSQL, append(gone, ids...)); err != nil {
		return err
	}
	res.Descendants += int64(len(gone))
	if len(parents) > 0 {
		if _, err := tx.Exec(ctx, "SELECT count(*) FROM pepsi.joins($1::bigint[])", parents); err != nil {
			return err
		}
	}
	return nil
}
