package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Queue repair for administrators: Redrive puts messages back to pending,
// Purge deletes them. Neither touches a row a running dispatcher holds.
//
// A running row belongs to the dispatcher that owns the stage it was
// handed out at (pepsi.state.handed, else its stage), as long as that
// dispatcher runs: one of its workers may be processing the message.
// Rows that are running at a stage no dispatcher owns are orphans (the
// stage's next dispatcher resets them at start) and may be repaired. "No
// dispatcher owns the stage" is decided per row and transaction by taking
// the stage's lock shared for the transaction
// (pg_try_advisory_xact_lock_shared(queue.StageLockClass,
// hashtext(stage))): it fails while a dispatcher owns the stage, and while
// it is held no dispatcher can take the stage (it would find the lock
// taken and refuse, or in standby wait), so that a dispatcher cannot start
// and claim rows between the check and the change. The database-wide lock is taken shared
// for the transaction too: it fails while a dispatcher without a stage set
// runs, which owns every stage. The locks are taken only by transactions
// that may touch running rows. Rows of every other status are never held:
// the dispatcher's own writes to them (claiming pending rows, resuming
// paused ones, deleting old done ones) are guarded by their status, as
// every change here is.

// DefaultBatch is how many rows Redrive and Purge change per transaction.
const DefaultBatch = 10000

// redrivable lists the statuses Redrive moves back to pending.
var redrivable = []queue.Status{queue.Failed, queue.Cancelled, queue.Paused, queue.Done, queue.Running}

// NotFoundError is a message id that does not exist; errors.Is(err,
// ErrNotFound) holds for it.
type NotFoundError struct {
	ID   int64 // the first missing id
	More int   // how many more of the ids asked for are missing
}

func (e *NotFoundError) Error() string {
	if e.More > 0 {
		return fmt.Sprintf("no such message: %d (and %d more of the ids given)", e.ID, e.More)
	}
	return fmt.Sprintf("no such message: %d", e.ID)
}

// Is makes errors.Is(err, ErrNotFound) hold.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// Repair is what Redrive or Purge did.
type Repair struct {
	Changed int64 // rows redriven or purged (with DryRun: that would be)
	Held    int64 // running rows left alone because a dispatcher holds them
	Pending int64 // Redrive by id: rows already pending, left alone
	// A purge's unfinished descendants of the messages it deleted
	// (purgetree.go): Descendants deleted with them, Cancelled running
	// ones cancelled instead. Not in Changed; a dry run counts neither.
	Descendants int64
	Cancelled   int64
	// Holder is the dispatcher that holds the Held rows (nil when Held is 0).
	Holder *queue.LockHolder
}

// RedriveParams says which messages Redrive puts back.
type RedriveParams struct {
	// IDs are the messages to redrive, in one transaction; every one must
	// exist. When empty, every message with Status (and Stage, if set) is
	// redriven, in batches.
	IDs     []int64
	Status  queue.Status // failed, paused, done or running
	Stage   string
	Reason  string // with Status: only messages in this failure group (see FoldReason)
	ToStage string // when set, the messages are put back at this stage
	// Priority, when set, is the messages' new priority.
	Priority *int32
	DryRun   bool // with Status: count, change nothing
	Batch    int  // rows per transaction, DefaultBatch when 0
	// Progress, when set, is called after each batch with the rows changed so far.
	Progress func(changed int64)
}

// PurgeParams says which messages Purge deletes.
type PurgeParams struct {
	Status    queue.Status
	Stage     string
	OlderThan time.Duration // last updated at least this long ago
	DryRun    bool          // count, delete nothing
	Batch     int           // rows per transaction, DefaultBatch when 0
	// Progress, when set, is called after each batch with the rows deleted so far.
	Progress func(changed int64)
}

// selection is the rows a batched repair walks.
type selection struct {
	statuses  []queue.Status
	stage     string
	reason    string // a failure group (reasonSQL), "" for any
	olderThan time.Duration
	batch     int
	progress  func(int64)
}

const (
	// takeShared succeeds, and holds until the transaction ends, unless a
	// dispatcher without a stage set holds the database-wide lock.
	takeSharedSQL = `SELECT pg_try_advisory_xact_lock_shared($1)`

	// freeStage holds for a running row whose stage no dispatcher owns,
	// and keeps it so until the transaction ends.
	freeStage = `pg_try_advisory_xact_lock_shared(1885696115, hashtext(coalesce(handed, stage)))` // queue.StageLockClass, queue.HandedAt

	// batchSQL locks the next batch of matching rows in id order. Under READ
	// COMMITTED a row changed meanwhile is re-checked once unlocked and
	// dropped if it no longer matches; LIMIT counts the rows locked.
	// Running rows are taken only at stages no dispatcher owns.
	batchSQL = `
SELECT id FROM pepsi.state
 WHERE status = ANY($1::text[]) AND ($2::text = '' OR stage = $2)
   AND updated_at <= now() - $3::interval AND id > $4
   AND ($6::text = '' OR ` + reasonSQL + ` = $6)
   AND (status <> 'running' OR ` + freeStage + `)
 ORDER BY id LIMIT $5
   FOR UPDATE`

	// heldSQL counts the running rows of a selection (its stage, age and
	// failure group) at stages a dispatcher owns ($3: every stage), and
	// names one such stage.
	heldSQL = `
SELECT count(*), min(coalesce(handed, stage)) FROM pepsi.state
 WHERE status = 'running' AND ($1::text = '' OR stage = $1)
   AND updated_at <= now() - $2::interval
   AND ($4::text = '' OR ` + reasonSQL + ` = $4)
   AND ($3 OR NOT ` + freeStage + `)`

	countSQL = `
SELECT count(*) FROM pepsi.state
 WHERE status = ANY($1::text[]) AND ($2::text = '' OR stage = $2)
   AND updated_at <= now() - $3::interval
   AND ($4::text = '' OR ` + reasonSQL + ` = $4)`

	// redriveSQL puts rows back to pending with a clean slate: no timeout,
	// no attempts, no errors (keepReasonsSQL, run first, keeps them in
	// the message's history), and the new
	// priority if one is given. Running rows only at stages no dispatcher
	// owns. A finished row whose deduplication key another unfinished
	// message holds meanwhile (or a lower id of the same batch takes back)
	// comes back without it: one unfinished message per key.
	redriveSQL = `
UPDATE pepsi.state s
   SET status = 'pending', stage = coalesce(nullif($2::text, ''), s.stage), timeout = NULL, handed = NULL,
       attempts = 0, dispatch_error = NULL, error = NULL, updated_at = now(),
       priority = coalesce($4::int, s.priority),
       flow_key = ` + queue.FlowKeyAt + `coalesce(nullif($2::text, ''), s.stage)),
       dedup_key = CASE
           WHEN s.dedup_key IS NULL OR s.status IN ('pending', 'running', 'paused', 'held', 'waiting') THEN s.dedup_key
           WHEN EXISTS (SELECT FROM pepsi.state o
                         WHERE o.dedup_key = s.dedup_key AND o.status IN ('pending', 'running', 'paused', 'held', 'waiting')) THEN NULL
           WHEN EXISTS (SELECT FROM pepsi.state o
                         WHERE o.id = ANY($1::bigint[]) AND o.id < s.id AND o.dedup_key = s.dedup_key
                           AND o.status = ANY($3::text[])) THEN NULL
           ELSE s.dedup_key END
 WHERE s.id = ANY($1::bigint[]) AND s.status = ANY($3::text[])
   AND (s.status <> 'running' OR ` + freeStage + `)`

	// notifySQL wakes a running dispatcher (delivered at commit).
	notifySQL = `SELECT pg_notify((SELECT ingress_channel FROM pepsi.settings), '')`
)

// Redrive puts failed, paused, done or (while no dispatcher runs) running
// messages back to pending, optionally at another stage, clears their
// timeout, attempts and errors (the reasons pepsi.history does not hold
// are written to it first: keepReasonsSQL), and wakes the dispatcher. By id, a message
// that is already pending is left alone and counted in Pending; a missing
// id is a *NotFoundError and nothing is changed.
func (db *DB) Redrive(ctx context.Context, p RedriveParams) (Repair, error) {
	if len(p.IDs) > 0 {
		if p.DryRun || p.Reason != "" {
			return Repair{}, fmt.Errorf("redrive by id: DryRun and Reason go with Status")
		}
		return db.redriveIDs(ctx, p)
	}
	if !slices.Contains(redrivable, p.Status) {
		return Repair{}, fmt.Errorf("cannot redrive %s messages (want failed, paused, done or running)", p.Status)
	}
	sel := selection{statuses: []queue.Status{p.Status}, stage: p.Stage, reason: p.Reason, batch: p.Batch, progress: p.Progress}
	if p.DryRun {
		return db.count(ctx, sel)
	}
	return db.batches(ctx, sel, func(tx pgx.Tx, ids []int64) error {
		if _, err := tx.Exec(ctx, keepReasonsSQL, ids, statusText(redrivable)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, redriveSQL, ids, p.ToStage, statusText(redrivable), p.Priority); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, notifySQL)
		return err
	})
}

// redriveIDs redrives the listed messages in one transaction.
func (db *DB) redriveIDs(ctx context.Context, p RedriveParams) (Repair, error) {
	ids := slices.Clone(p.IDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var res Repair
	var heldAt string // a stage of the held rows
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		res, heldAt = Repair{}, ""
		rows, err := tx.Query(ctx, "SELECT id, status FROM pepsi.state WHERE id = ANY($1) ORDER BY id FOR UPDATE", ids)
		if err != nil {
			return err
		}
		found := make(map[int64]queue.Status, len(ids))
		var id int64
		var st string
		_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
			found[id] = queue.Status(st)
			return nil
		})
		if err != nil {
			return err
		}
		if len(found) < len(ids) {
			nf := &NotFoundError{More: len(ids) - len(found) - 1}
			for _, id := range ids {
				if _, ok := found[id]; !ok {
					nf.ID = id
					break
				}
			}
			return nf
		}
		var running int64
		for _, st := range found {
			switch st {
			case queue.Pending:
				res.Pending++
			case queue.Running:
				running++
			}
		}
		allowed := redrivable
		if running > 0 {
			free, err := takeShared(ctx, tx)
			if err != nil {
				return err
			}
			if !free {
				allowed = []queue.Status{queue.Failed, queue.Cancelled, queue.Paused, queue.Done}
				res.Held = running
			}
		}
		if _, err := tx.Exec(ctx, keepReasonsSQL, ids, statusText(allowed)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, redriveSQL, ids, p.ToStage, statusText(allowed), p.Priority)
		if err != nil {
			return err
		}
		res.Changed = tag.RowsAffected()
		if running > 0 && res.Held == 0 {
			if err := tx.QueryRow(ctx, "SELECT count(*), coalesce(min(coalesce(handed, stage)), '') FROM pepsi.state WHERE id = ANY($1) AND status = 'running'", ids).Scan(&res.Held, &heldAt); err != nil {
				return err
			}
		}
		if res.Changed > 0 {
			_, err = tx.Exec(ctx, notifySQL)
		}
		return err
	})
	if err != nil {
		return Repair{}, err
	}
	return res, db.holder(ctx, &res, heldAt)
}

// Purge deletes messages of one status (and stage, and age) in batches,
// each in its own transaction; running messages only while no dispatcher
// runs. Their unfinished descendants go with them (purgeIDs). With DryRun
// it counts what it would delete (the messages of the status only).
func (db *DB) Purge(ctx context.Context, p PurgeParams) (Repair, error) {
	if !slices.Contains(queue.Statuses, p.Status) {
		return Repair{}, fmt.Errorf("unknown status %q", p.Status)
	}
	sel := selection{statuses: []queue.Status{p.Status}, stage: p.Stage, olderThan: p.OlderThan, batch: p.Batch, progress: p.Progress}
	if p.DryRun {
		return db.count(ctx, sel)
	}
	// A batch's descendants count once its transaction commits, which
	// batches says by calling progress: a retried one counts once.
	var tree, cur Repair
	sel.progress = func(n int64) {
		tree.Descendants, tree.Cancelled = tree.Descendants+cur.Descendants, tree.Cancelled+cur.Cancelled
		if p.Progress != nil {
			p.Progress(n)
		}
	}
	res, err := db.batches(ctx, sel, func(tx pgx.Tx, ids []int64) error {
		cur = Repair{}
		return purgeIDs(ctx, tx, ids, &cur)
	})
	res.Descendants, res.Cancelled = tree.Descendants, tree.Cancelled
	return res, err
}

// batches locks the rows of sel batch by batch, in id order, and calls
// apply on each batch in its transaction. Running rows are left out (and
// counted in Held) once a dispatcher is found to hold the lock.
func (db *DB) batches(ctx context.Context, sel selection, apply func(pgx.Tx, []int64) error) (Repair, error) {
	size := sel.batch
	if size <= 0 {
		size = DefaultBatch
	}
	var res Repair
	held := false
	var last int64
	for {
		var ids []int64
		err := db.inTx(ctx, func(tx pgx.Tx) error {
			ids = nil
			sts := sel.statuses
			if slices.Contains(sts, queue.Running) && !held {
				free, err := takeShared(ctx, tx)
				if err != nil {
					return err
				}
				held = !free
			}
			if held {
				sts = slices.DeleteFunc(slices.Clone(sts), func(s queue.Status) bool { return s == queue.Running })
			}
			if len(sts) == 0 {
				return nil
			}
			rows, err := tx.Query(ctx, batchSQL, statusText(sts), sel.stage, sel.olderThan, last, size, sel.reason)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil || len(ids) == 0 {
				return err
			}
			return apply(tx, ids)
		})
		if err != nil {
			return res, err
		}
		if len(ids) == 0 {
			break
		}
		res.Changed += int64(len(ids))
		last = ids[len(ids)-1]
		if sel.progress != nil {
			sel.progress(res.Changed)
		}
	}
	if slices.Contains(sel.statuses, queue.Running) {
		n, stage, err := db.held(ctx, sel, held)
		if err != nil {
			return res, err
		}
		res.Held = n
		return res, db.holder(ctx, &res, stage)
	}
	return res, nil
}

// held counts the running rows of sel at stages a dispatcher owns (all:
// every one, a dispatcher without a stage set runs), and names one of
// those stages.
func (db *DB) held(ctx context.Context, sel selection, all bool) (int64, string, error) {
	var n int64
	var stage *string
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, heldSQL, sel.stage, sel.olderThan, all, sel.reason).Scan(&n, &stage)
	})
	if stage == nil {
		return n, "", err
	}
	return n, *stage, err
}

// count is a dry run of batches.
func (db *DB) count(ctx context.Context, sel selection) (Repair, error) {
	var res Repair
	d, err := db.q.LockHolder(ctx)
	if err != nil {
		return res, err
	}
	if len(sel.statuses) > 0 {
		if err := db.pool.QueryRow(ctx, countSQL, statusText(sel.statuses), sel.stage, sel.olderThan, sel.reason).Scan(&res.Changed); err != nil {
			return res, err
		}
	}
	if d != nil && slices.Contains(sel.statuses, queue.Running) {
		// all: a dispatcher without a stage set runs (it holds the
		// database-wide lock exclusive); else only the owned stages' rows.
		var all bool
		if err := db.inTx(ctx, func(tx pgx.Tx) error {
			free, err := takeShared(ctx, tx)
			all = !free
			return err
		}); err != nil {
			return res, err
		}
		var stage string
		if res.Held, stage, err = db.held(ctx, sel, all); err != nil {
			return res, err
		}
		res.Changed -= res.Held
		return res, db.holder(ctx, &res, stage)
	}
	return res, nil
}

// holder fills in the dispatcher that holds res.Held rows: the owner of
// stage, one of their stages, or else one that runs.
func (db *DB) holder(ctx context.Context, res *Repair, stage string) error {
	if res.Held == 0 {
		return nil
	}
	if stage != "" {
		owners, err := db.Owners(ctx, []string{stage})
		if err != nil {
			return err
		}
		if o, ok := owners[stage]; ok {
			res.Holder = &o
			return nil
		}
	}
	d, err := db.q.LockHolder(ctx)
	if err != nil {
		return err
	}
	if d == nil { // it stopped meanwhile
		d = &queue.LockHolder{}
	}
	res.Holder = d
	return nil
}

// RunningOwner returns the dispatcher that holds running message id, the
// owner of the stage it was handed out at (as Redrive decides); nil when
// the message is not running or no dispatcher owns that stage.
func (db *DB) RunningOwner(ctx context.Context, id int64) (*queue.LockHolder, error) {
	var stage string
	err := db.pool.QueryRow(ctx, "SELECT "+queue.HandedAt+" FROM pepsi.state WHERE id = $1 AND status = 'running'", id).Scan(&stage)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	owners, err := db.Owners(ctx, []string{stage})
	if o, ok := owners[stage]; ok && err == nil {
		return &o, nil
	}
	return nil, err
}

// takeShared takes the single-dispatcher lock shared for the transaction,
// and reports whether it could: false means a dispatcher runs.
func takeShared(ctx context.Context, tx pgx.Tx) (bool, error) {
	var free bool
	err := tx.QueryRow(ctx, takeSharedSQL, int64(queue.DispatcherLock)).Scan(&free)
	return free, err
}

func statusText(sts []queue.Status) []string {
	out := make([]string, len(sts))
	for i, s := range sts {
		out[i] = string(s)
	}
	return out
}
