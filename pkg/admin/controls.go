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

// The operator's controls (pepsi queue pause, resume, hold, release,
// cancel; the dashboard's actions of the same names). The SQL is the SQL
// API's (sql/functions/20_controls.sql: pepsi.pause_stage, resume_stage,
// hold, release, cancel), so that an application, the command line and the
// dashboard do the same thing; these add what an operator needs around it:
// messages picked by status and stage in batches, ids that must exist,
// and running messages left alone while a dispatcher holds them.
//
// Each takes the acting user (By): the OS user for the command line, the
// dashboard's user for the dashboard. It is recorded with a paused stage
// and in a cancelled message's error ("cancelled by alice").

// StagePause is a paused stage: who paused it, when and why.
type StagePause struct {
	Stage  string    `json:"stage"`
	By     string    `json:"paused_by"`
	At     time.Time `json:"paused_at"`
	Reason string    `json:"reason,omitempty"`
}

// pauseColumns are a StagePause's columns, their texts cut to what
// pepsi.pause_stage takes: a pause made before it refused longer ones is
// shown as it would be now (twice a page, on the dashboard's overview).
const pauseColumns = "stage, substr(paused_by, 1, 255), paused_at, substr(reason, 1, 1000)"

// PauseStage pauses stage on behalf of by, with reason (may be empty):
// the claim hands it nothing new from now on, in every dispatcher, until
// ResumeStage. It returns the pause in force and whether it was there
// already (then it is left as it was: by whoever paused it first).
func (db *DB) PauseStage(ctx context.Context, stage, by, reason string) (StagePause, bool, error) {
	var p StagePause
	var already bool
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		var made bool
		if err := tx.QueryRow(ctx, "SELECT pepsi.pause_stage($1, $2, $3)", stage, reason, by).Scan(&made); err != nil {
			return err
		}
		already = !made
		return tx.QueryRow(ctx, "SELECT "+pauseColumns+" FROM pepsi.paused_stages WHERE stage = $1", stage).
			Scan(&p.Stage, &p.By, &p.At, &p.Reason)
	})
	return p, already, err
}

// ResumeStage ends the pause of stage and wakes the dispatchers. It
// returns the pause it ended, and false when the stage was not paused.
func (db *DB) ResumeStage(ctx context.Context, stage string) (StagePause, bool, error) {
	var p StagePause
	var was bool
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, "SELECT "+pauseColumns+" FROM pepsi.paused_stages WHERE stage = $1 FOR UPDATE", stage).
			Scan(&p.Stage, &p.By, &p.At, &p.Reason)
		if errors.Is(err, pgx.ErrNoRows) {
			was = false
			return nil
		}
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pepsi.resume_stage($1)", stage).Scan(&was)
	})
	return p, was, err
}

// PausedStages returns the paused stages, by name.
func (db *DB) PausedStages(ctx context.Context) ([]StagePause, error) {
	rows, err := db.pool.Query(ctx, "SELECT "+pauseColumns+" FROM pepsi.paused_stages ORDER BY stage")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StagePause, error) {
		var p StagePause
		err := r.Scan(&p.Stage, &p.By, &p.At, &p.Reason)
		return p, err
	})
}

// PausedArrivals counts, per paused stage, the messages that reached it
// pending after its pause began: admitted, advanced to it, released or
// resumed there since (pending since then: pepsi.state_pending's
// updated_at), or enqueued since and not admitted yet.
func (db *DB) PausedArrivals(ctx context.Context) (map[string]int64, error) {
	return perStage(ctx, db.pool, `SELECT p.stage,
		(SELECT count(*) FROM pepsi.state_live s WHERE s.stage = p.stage AND s.status = 'pending' AND s.updated_at > p.paused_at)
		+ (SELECT count(*) FROM pepsi.ingress i WHERE i.stage = p.stage AND i.created_at > p.paused_at)
		  FROM pepsi.paused_stages p`)
}

// StageSeen reports whether the database knows stage: it has unfinished
// messages (or ones enqueued and not admitted yet), statistics (a
// dispatcher ran it, perhaps another host's stage set), or a pause. With
// the configuration's [stage-NAME] sections, this is what makes a stage
// known to pepsi queue pause; a name that is neither is a typo.
func (db *DB) StageSeen(ctx context.Context, stage string) (bool, error) {
	var seen bool
	err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pepsi.state_live WHERE stage = $1)
		OR EXISTS (SELECT FROM pepsi.ingress WHERE stage = $1)
		OR EXISTS (SELECT FROM pepsi.stage_stats WHERE stage = $1)
		OR EXISTS (SELECT FROM pepsi.paused_stages WHERE stage = $1)`, stage).Scan(&seen)
	return seen, err
}

// ControlParams says which messages Hold, Release or Cancel change, and
// on whose behalf.
type ControlParams struct {
	// IDs are the messages to change, in one transaction; every one must
	// exist (else a *NotFoundError, and nothing changes). When empty,
	// every message with Status (and Stage, if set) is changed, in
	// batches.
	IDs    []int64
	Status queue.Status
	Stage  string
	By     string // the acting user
	// Force, for Cancel, cancels running messages too, whoever holds them:
	// their pass goes on, but its outcome is ignored (see pepsi.cancel).
	Force bool
	// DryRun counts what would change and changes nothing (the
	// dashboard's confirmation).
	DryRun bool
	Batch  int // rows per transaction, DefaultBatch when 0
	// Progress, when set, is called after each batch with the rows changed so far.
	Progress func(changed int64)
}

// ControlResult is what Hold, Release or Cancel did.
type ControlResult struct {
	Changed int64 // messages held, released or cancelled
	// Skipped are messages given by id that the control does not apply
	// to in their status (held already, finished, …), left as they are.
	Skipped int64
	// Running are running messages left alone: a dispatcher holds them
	// (Cancel without Force), or they are in a pass (Hold; Release counts
	// them in Skipped). Holder is the dispatcher that holds them, when one
	// does.
	Running int64
	Holder  *queue.LockHolder
	// Busy are running messages, among Running, that Cancel did not wait
	// for: a stage's pass holds their row locked (pkg/worker's does), and
	// ends as the stage decides.
	Busy []int64
}

// control is one of the message controls.
type control struct {
	verb     string         // for errors
	statuses []queue.Status // what it applies to
	want     string         // the statuses, as errors name them
}

var (
	holdControl    = control{"hold", []queue.Status{queue.Pending, queue.Paused}, "pending or paused"}
	releaseControl = control{"release", []queue.Status{queue.Held}, "held"}
	cancelControl  = control{"cancel", []queue.Status{queue.Pending, queue.Paused, queue.Held, queue.Waiting}, "pending, paused, held or waiting"}
)

// CancelReason is the error of a message that by cancelled.
func CancelReason(by string) string { return "cancelled by " + by }

// Hold holds pending and paused messages: they are never claimed nor
// resumed until released, and keep their place (id, deduplication key,
// key's place under KEY_LIMIT). Running messages are left alone and
// counted in Running.
func (db *DB) Hold(ctx context.Context, p ControlParams) (ControlResult, error) {
	return db.control(ctx, holdControl, p, func(tx pgx.Tx, ids []int64) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, "SELECT pepsi.hold($1)", ids).Scan(&n)
		return n, err
	})
}

// Release puts held messages back where they were (paused until their
// timeout when they have one, else pending) and wakes the dispatchers.
func (db *DB) Release(ctx context.Context, p ControlParams) (ControlResult, error) {
	return db.control(ctx, releaseControl, p, func(tx pgx.Tx, ids []int64) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, "SELECT pepsi.release($1)", ids).Scan(&n)
		return n, err
	})
}

// Cancel ends pending, paused, held and waiting messages cancelled, with
// the error CancelReason(p.By); their deduplication keys are free again.
// pepsi.cancel cancels their unfinished descendants too (not counted), and
// settles the joins of the parents of those it cancels. A running
// message is cancelled only when no dispatcher holds it (an orphan), or
// with p.Force; the others are counted in Running. By status, running is
// not one of the statuses it takes: cancel running messages by id.
func (db *DB) Cancel(ctx context.Context, p ControlParams) (ControlResult, error) {
	if p.By == "" {
		return ControlResult{}, errors.New("cancel: no acting user")
	}
	return db.control(ctx, cancelControl, p, func(tx pgx.Tx, ids []int64) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, "SELECT pepsi.cancel($1, $2, false)", ids, p.By).Scan(&n)
		return n, err
	})
}

// control applies c to the messages of p, by id or in batches.
func (db *DB) control(ctx context.Context, c control, p ControlParams, apply func(pgx.Tx, []int64) (int64, error)) (ControlResult, error) {
	if len(p.IDs) > 0 {
		if p.Status != "" || p.Stage != "" {
			return ControlResult{}, fmt.Errorf("%s by id: Status and Stage go without IDs", c.verb)
		}
		return db.controlIDs(ctx, c, p, apply)
	}
	if !slices.Contains(c.statuses, p.Status) {
		return ControlResult{}, fmt.Errorf("cannot %s %s messages (want %s)", c.verb, p.Status, c.want)
	}
	sel := selection{statuses: []queue.Status{p.Status}, stage: p.Stage, batch: p.Batch, progress: p.Progress}
	var res ControlResult
	if p.DryRun {
		r, err := db.count(ctx, sel)
		res.Changed = r.Changed
		return res, err
	}
	_, err := db.batches(ctx, sel, func(tx pgx.Tx, ids []int64) error {
		n, err := apply(tx, ids)
		res.Changed += n
		return err
	})
	return res, err
}

// controlIDs applies c to the listed messages in one transaction. The
// rows are read without a lock (a running row may be locked by its
// stage's transaction, which a hold or a plain cancel must not wait for);
// the change itself is guarded by status.
func (db *DB) controlIDs(ctx context.Context, c control, p ControlParams, apply func(pgx.Tx, []int64) (int64, error)) (ControlResult, error) {
	ids := slices.Clone(p.IDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var res ControlResult
	var heldAt string // a stage of the running rows left alone
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		res, heldAt = ControlResult{}, ""
		rows, err := tx.Query(ctx, "SELECT id, status FROM pepsi.state WHERE id = ANY($1)", ids)
		if err != nil {
			return err
		}
		found := make(map[int64]queue.Status, len(ids))
		var id int64
		var st string
		if _, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
			found[id] = queue.Status(st)
			return nil
		}); err != nil {
			return err
		}
		if err := missing(ids, found); err != nil {
			return err
		}
		var running []int64
		for _, id := range ids {
			if found[id] == queue.Running {
				running = append(running, id)
			}
		}
		if res.Changed, err = apply(tx, ids); err != nil {
			return err
		}
		if len(running) > 0 && c.verb == cancelControl.verb {
			n, busy, err := db.cancelRunning(ctx, tx, running, p)
			if err != nil {
				return err
			}
			res.Changed += n
			res.Busy = busy
		}
		// What is running now (the claim may have taken some meanwhile).
		if err := tx.QueryRow(ctx, "SELECT count(*), coalesce(min("+queue.HandedAt+"), '') FROM pepsi.state WHERE id = ANY($1) AND status = 'running'", ids).
			Scan(&res.Running, &heldAt); err != nil {
			return err
		}
		if c.verb == releaseControl.verb {
			res.Running = 0 // not held: skipped
		}
		res.Skipped = int64(len(ids)) - res.Changed - res.Running
		if p.DryRun {
			return errDryRun // rolled back
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDryRun) {
		return ControlResult{}, err
	}
	return res, db.runningHolder(ctx, &res, heldAt)
}

// errDryRun rolls back a dry run's transaction.
var errDryRun = errors.New("dry run")

// cancelRunning cancels the running messages among ids: all of them with
// p.Force, else those no dispatcher holds (as Redrive decides: the
// single-dispatcher lock and their stages' locks taken shared for the
// transaction, so that no dispatcher starts and claims meanwhile). It
// does not wait for a row a stage's pass holds locked (a stage that locks
// its message first holds it until its pass ends, which may be minutes,
// and then moves it on, leaving nothing to cancel): it returns those as
// busy, for the operator to hear at once.
func (db *DB) cancelRunning(ctx context.Context, tx pgx.Tx, ids []int64, p ControlParams) (int64, []int64, error) {
	if !p.Force {
		free, err := takeShared(ctx, tx)
		if err != nil || !free {
			return 0, nil, err
		}
		if err := tx.QueryRow(ctx, "SELECT coalesce(array_agg(id), '{}') FROM pepsi.state WHERE id = ANY($1) AND status = 'running' AND "+freeStage, ids).
			Scan(&ids); err != nil || len(ids) == 0 {
			return 0, nil, err
		}
	}
	var locked, busy []int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM (
		SELECT id FROM pepsi.state WHERE id = ANY($1) AND status = 'running' FOR UPDATE SKIP LOCKED) r`, ids).Scan(&locked); err != nil {
		return 0, nil, err
	}
	// Skipped: locked rows, and rows no longer running, which are not busy.
	if err := tx.QueryRow(ctx, "SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM pepsi.state WHERE id = ANY($1) AND status = 'running' AND NOT id = ANY($2)",
		ids, locked).Scan(&busy); err != nil {
		return 0, nil, err
	}
	var n int64
	err := tx.QueryRow(ctx, "SELECT pepsi.cancel($1, $2, true)", locked, p.By).Scan(&n)
	return n, busy, err
}

// runningHolder fills in the dispatcher that holds res.Running rows (the
// owner of stage, one of their stages), when one does.
func (db *DB) runningHolder(ctx context.Context, res *ControlResult, stage string) error {
	if res.Running == 0 {
		return nil
	}
	r := Repair{Held: res.Running}
	if err := db.holder(ctx, &r, stage); err != nil {
		return err
	}
	res.Holder = r.Holder
	return nil
}

// missing returns a *NotFoundError for the ids not in found, or nil.
func missing(ids []int64, found map[int64]queue.Status) error {
	if len(found) == len(ids) {
		return nil
	}
	nf := &NotFoundError{More: len(ids) - len(found) - 1}
	for _, id := range ids {
		if _, ok := found[id]; !ok {
			nf.ID = id
			break
		}
	}
	return nf
}

// NextDue returns, per stage, when its earliest paused message (a retry,
// or a scheduled message) falls due: when the dispatcher resumes it.
func (db *DB) NextDue(ctx context.Context) (map[string]time.Time, error) {
	return dueByStage(db.pool.Query(ctx, "SELECT stage, min(timeout) FROM pepsi.state_live WHERE status = 'paused' GROUP BY stage"))
}
