package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
)

// Stage ownership: each stage has at most one claiming dispatcher.
//
// The locks are session advisory locks held by the dispatcher's listener
// session:
//
//   - one per stage, the two-int form (StageLockClass, hashtext(stage)),
//     taken exclusive by the stage's owner. hashtext is computed by the
//     server, so every command (the retry guard, queue summary) finds a
//     stage's lock from its name alone. Two stage names that hash alike
//     share a lock: that can only refuse a dispatcher, never let two own
//     one stage (CheckStageKeys refuses such a configuration);
//   - the database-wide lock of the single-dispatcher days (DispatcherLock,
//     the bigint form: its objsubid differs, so it cannot meet a stage
//     lock), taken exclusive by a dispatcher that owns every stage (no
//     STAGES, no --stages) and shared by one with a stage set: a
//     dispatcher without a set excludes every other one, and is refused by
//     any running set;
//   - the janitor lock (janitorLock), taken with a try by every dispatcher
//     and held by the first: work that is not per stage (retention,
//     vacuum, writing settings) is done by its holder alone.
//
// A set is taken whole or not at all: each lock is tried without waiting,
// and on any refusal every advisory lock the session holds is released.
//
// The keys are in locks.go.

// OwnedError is a refusal: the stage (or, for Stage "", the database-wide
// lock) is owned by Holder. errors.Is(err, ErrLocked) holds for it.
type OwnedError struct {
	Stage  string      // the first stage found owned; "" for the database-wide lock
	Shared bool        // Stage "": the lock is held by dispatchers with stage sets
	Holder *LockHolder // nil when the holder was gone by the time it was looked up
}

// Error says which stage is owned and by whom: "stage enrich is owned by
// pepsi dispatch pid 812 on mx1".
func (e *OwnedError) Error() string {
	who := "another session"
	if e.Holder != nil {
		who = e.Holder.Name
		if who == "" {
			who = fmt.Sprintf("server pid %d", e.Holder.PID)
		}
	}
	switch {
	case e.Stage != "":
		return fmt.Sprintf("stage %s is owned by %s", e.Stage, who)
	case e.Shared:
		return fmt.Sprintf("a dispatcher with a stage set runs (%s): a dispatcher without --stages would own every stage", who)
	}
	return fmt.Sprintf("every stage is owned by %s (a dispatcher without --stages)", who)
}

// Is makes errors.Is(err, ErrLocked) hold.
func (e *OwnedError) Is(target error) bool { return target == ErrLocked }

// TakeStages takes the locks of a dispatcher owning stages (all: every
// stage, the database-wide lock exclusive; otherwise stages only, and the
// database-wide lock shared), whole or not at all. A refusal is an
// *OwnedError naming the first stage found owned and its holder; the
// session then holds no advisory lock.
//
// A lock that is gone by the time its holder is looked up was being
// released (a dispatcher that just stopped): the set is tried again, a few
// times.
//
// Once the set is taken it takes token (the dispatcher's token lock, see
// SetFence), and waits for every writing transaction of the stages'
// previous owner that passed its fence to end.
func (l *Listener) TakeStages(ctx context.Context, stages []string, all bool, token int64) error {
	for try := 1; ; try++ {
		oe, err := l.takeStages(ctx, stages, all)
		if err != nil {
			return err
		}
		if oe == nil {
			return l.fenceOff(ctx, stages, token)
		}
		if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
			return err
		}
		if oe.Holder != nil || try == 5 {
			return oe
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * 20 * time.Millisecond):
		}
	}
}

// WaitFor blocks until the lock an *OwnedError named is free and takes it:
// stage's lock, or for stage "" the database-wide lock (exclusive with
// all, else shared). It tries every standbyPoll rather than waiting in
// the server's lock queue: a statement waiting there holds its snapshot,
// and with it back every VACUUM of the database for as long as the
// standby stands by. Meanwhile it holds the standby lock of the stage
// shared, which is how DispatcherSessions sees it wait. TakeStages then
// takes the whole set; Release gives this hold back.
func (l *Listener) WaitFor(ctx context.Context, stage string, all bool) error {
	key, args := "($1)", []any{int64(StandbyLock)}
	if stage != "" {
		key, args = "($1, hashtext($2))", []any{int32(StandbyLockClass), stage}
	}
	if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_lock_shared"+key, args...); err != nil {
		return err
	}
	defer l.cleanup("SELECT pg_advisory_unlock_shared"+key, args...)
	try := l.lockSQL("pg_try_advisory_lock", stage, all)
	for {
		var ok bool
		if err := l.conn.QueryRow(ctx, try, l.lockArgs(stage)...).Scan(&ok); err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(standbyPoll):
		}
	}
}

// standbyPoll is how often a standby tries the lock it waits for: the most
// a takeover waits for it.
const standbyPoll = 100 * time.Millisecond

// Release gives back one hold taken by WaitFor.
func (l *Listener) Release(ctx context.Context, stage string, all bool) error {
	_, err := l.conn.Exec(ctx, l.lockSQL("pg_advisory_unlock", stage, all), l.lockArgs(stage)...)
	return err
}

func (l *Listener) lockSQL(fn, stage string, all bool) string {
	if stage != "" {
		return "SELECT " + fn + "($1, hashtext($2))"
	}
	if !all {
		fn += "_shared"
	}
	return "SELECT " + fn + "($1)"
}

func (l *Listener) lockArgs(stage string) []any {
	if stage != "" {
		return []any{int32(StageLockClass), stage}
	}
	return []any{int64(DispatcherLock)}
}

// fenceOff takes token and waits for the old owners' fenced transactions.
func (l *Listener) fenceOff(ctx context.Context, stages []string, token int64) error {
	if token != 0 {
		if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", token); err != nil {
			return err
		}
	}
	if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_lock($2, hashtext(s)) FROM unnest($1::text[]) s", stages, int32(fenceLockClass)); err != nil {
		return err
	}
	_, err := l.conn.Exec(ctx, "SELECT pg_advisory_unlock($2, hashtext(s)) FROM unnest($1::text[]) s", stages, int32(fenceLockClass))
	return err
}

// NewToken returns a dispatcher's token lock key: random, and never one of
// pepsi's other keys (its top 16 bits are "pe", theirs are 0).
func NewToken() int64 { return 0x7065<<48 | rand.Int64N(1<<48) }

// fence is what a dispatcher's writing transactions check first.
type fence struct {
	token  int64
	stages []string
}

// fenceSQL fails unless the session holding the token lock lives; it
// takes the stages' fence locks shared for the transaction (see
// sql/006_stage_sets.sql), and has the server end the transaction if it
// is left idle for idleFence: a dispatcher frozen or cut off halfway
// through one would otherwise hold those locks, and keep its standby
// from taking over, until the server noticed the connection gone.
const fenceSQL = "SELECT pepsi.fence($1, $2), set_config('idle_in_transaction_session_timeout', '" + idleFence + "', true)"

// idleFence is how long a fenced transaction may wait for the
// dispatcher's next statement: far longer than any gap between a
// transaction's statements, short beside a takeover's other waits.
const idleFence = "10s"

// SetFence makes every queue write of the dispatcher's (RunTurn,
// ResetRunning, ResetOrphans, ExpireDone, SetArmed) run in one transaction
// after pepsi.fence(token, stages): once the lock session that holds token
// is gone, they fail (IsFenced) and change nothing. The statistics are not
// fenced: they count what the dispatcher did, and each set's rows are its
// own.
func (db *DB) SetFence(token int64, stages []string) {
	db.fence.Store(&fence{token: token, stages: stages})
}

// IsFenced reports whether err is pepsi.fence's: the dispatcher's lock
// session is gone.
func IsFenced(err error) bool {
	code, _ := pgerr.SQLState(err)
	return code == "55P03"
}

// execFenced runs sql after the fence, in one transaction.
func (db *DB) execFenced(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := db.fenced(ctx, sql, args, func(r pgx.Row) error { return nil }, &tag)
	return tag, err
}

// queryRowFenced runs sql after the fence, in one transaction, and scans
// its one row into dst.
func (db *DB) queryRowFenced(ctx context.Context, sql string, args []any, dst ...any) error {
	return db.fenced(ctx, sql, args, func(r pgx.Row) error { return r.Scan(dst...) }, nil)
}

// fenced runs sql after the fence (without one when none is set): its
// command tag goes to tag when that is set, else its row to scan.
func (db *DB) fenced(ctx context.Context, sql string, args []any, scan func(pgx.Row) error, tag *pgconn.CommandTag) error {
	f := db.fence.Load()
	b := &pgx.Batch{}
	if f != nil {
		b.Queue(fenceSQL, f.token, f.stages)
	}
	b.Queue(sql, args...)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	if f != nil {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	var err error
	if tag != nil {
		*tag, err = br.Exec()
	} else {
		err = scan(br.QueryRow())
	}
	if err != nil {
		return err
	}
	return br.Close()
}

// takeStages tries each lock once; a refusal is returned, not released.
func (l *Listener) takeStages(ctx context.Context, stages []string, all bool) (*OwnedError, error) {
	// The stages first: a refusal names the stage, which says more than
	// the database-wide lock.
	var owned *string
	err := l.conn.QueryRow(ctx, `SELECT s FROM unnest($1::text[]) WITH ORDINALITY AS u(s, n)
		WHERE NOT pg_try_advisory_lock($2, hashtext(s)) ORDER BY n LIMIT 1`, stages, int32(StageLockClass)).Scan(&owned)
	if err != nil && !isNoRows(err) {
		return nil, err
	}
	if owned != nil {
		h, err := l.stageHolder(ctx, *owned)
		return &OwnedError{Stage: *owned, Holder: h}, err
	}
	fn := "pg_try_advisory_lock_shared"
	if all {
		fn = "pg_try_advisory_lock"
	}
	var ok bool
	if err := l.conn.QueryRow(ctx, "SELECT "+fn+"($1)", int64(DispatcherLock)).Scan(&ok); err != nil {
		return nil, err
	}
	if ok {
		return nil, nil
	}
	// all: someone holds it, exclusive or shared; otherwise exclusive.
	h, shared, err := l.globalHolder(ctx)
	return &OwnedError{Shared: shared, Holder: h}, err
}

// LockHolder is the session that holds the single-dispatcher lock: what the
// database knows of the running dispatcher.
type LockHolder struct {
	PID  int32  // server pid of the session holding the single-dispatcher lock
	Name string // its application_name ("pepsi dispatch pid N on HOST"), "" when unknown
	// Set: a dispatcher of a stage set (it holds the database-wide lock
	// shared); others may own other stages (see pkg/admin's Owners).
	Set bool
}

// String describes the dispatcher for a message.
func (d *LockHolder) String() string {
	if d.Name != "" {
		return fmt.Sprintf("%s, server pid %d", d.Name, d.PID)
	}
	return fmt.Sprintf("server pid %d", d.PID)
}

// holderSQL finds a session holding the database-wide lock: exclusive (a
// dispatcher that owns every stage, Listener.TakeStages) or, held by a
// dispatcher's session, shared (one with a stage set; the shared
// transaction locks that pkg/admin's repairs take are not it). A standby
// that waits for the lock is not granted it and does not count.
const holderSQL = `
SELECT l.pid, coalesce(a.application_name, ''), l.mode
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
   AND (l.mode = 'ExclusiveLock' OR a.application_name LIKE 'pepsi dispatch pid %')
 ORDER BY l.mode = 'ExclusiveLock' DESC, l.pid
 LIMIT 1`

// LockHolder returns the session of a running dispatcher (the one that
// owns every stage, or one of those with a stage set), or nil when none
// runs. A dispatcher that is reconnecting after losing its session holds
// no lock until it has reconnected. It runs the statement
// Listener.TakeStages names a refusal's holder with.
func (db *DB) LockHolder(ctx context.Context) (*LockHolder, error) {
	var d LockHolder
	var mode string
	err := db.pool.QueryRow(ctx, holderSQL, int64(DispatcherLock)).Scan(&d.PID, &d.Name, &mode)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d.Set = mode != "ExclusiveLock"
	return &d, nil
}

// stageHolderSQL finds the session that owns a stage: the exclusive
// session lock (StageLockClass, hashtext(stage)).
const stageHolderSQL = `
SELECT l.pid, coalesce(a.application_name, '')
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock' AND l.objsubid = 2
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid::bigint = $1 AND l.objid::bigint = hashtext($2)::bigint & $3
 LIMIT 1`

func (l *Listener) stageHolder(ctx context.Context, stage string) (*LockHolder, error) {
	var h LockHolder
	err := l.conn.QueryRow(ctx, stageHolderSQL, int64(StageLockClass), stage, ObjIDMask).Scan(&h.PID, &h.Name)
	if isNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// globalHolder finds a dispatcher holding the database-wide lock, and
// whether it holds it shared (a dispatcher with a stage set).
func (l *Listener) globalHolder(ctx context.Context) (*LockHolder, bool, error) {
	var h LockHolder
	var mode string
	err := l.conn.QueryRow(ctx, holderSQL, int64(DispatcherLock)).Scan(&h.PID, &h.Name, &mode)
	if isNoRows(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return &h, mode != "ExclusiveLock", nil
}

// TryJanitor takes the janitor lock if no other dispatcher holds it, and
// reports whether it did.
func (l *Listener) TryJanitor(ctx context.Context) (bool, error) {
	var ok bool
	err := l.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(janitorLock)).Scan(&ok)
	return ok, err
}

// StageKeyClash returns two of the stages whose locks would be one (their
// names hash alike), or "" and "" when all differ.
func (l *Listener) StageKeyClash(ctx context.Context, stages []string) (string, string, error) {
	var a, b *string
	err := l.conn.QueryRow(ctx, `SELECT min(s), max(s) FROM unnest($1::text[]) s
		GROUP BY hashtext(s) HAVING count(DISTINCT s) > 1 LIMIT 1`, stages).Scan(&a, &b)
	if isNoRows(err) || a == nil {
		return "", "", nil
	}
	return *a, *b, err
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// standbyWaitsSQL finds another session holding a standby lock (WaitFor)
// for one of the stages $3, or, with $5, for the database-wide lock.
const standbyWaitsSQL = `
SELECT EXISTS (SELECT FROM pg_locks l
 WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.objsubid = 1 AND $5 AND ((l.classid::bigint << 32) | l.objid::bigint) = $1)
     OR (l.objsubid = 2 AND l.classid::bigint = $2
         AND l.objid::bigint IN (SELECT hashtext(s)::bigint & $4 FROM unnest($3::text[]) s))))`

// StandbyWaits reports whether a standby waits for one of stages (with
// all, for the database-wide lock too). A dispatcher whose lock session
// was ended leaves them to it rather than take them back: the standby
// polls, so it would not otherwise be first.
func (l *Listener) StandbyWaits(ctx context.Context, stages []string, all bool) (bool, error) {
	var ok bool
	err := l.conn.QueryRow(ctx, standbyWaitsSQL, int64(StandbyLock), int64(StandbyLockClass), stages, ObjIDMask, all).Scan(&ok)
	return ok, err
}
