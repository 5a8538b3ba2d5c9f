package queue

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Turn is one job of a dispatcher's lane: statements sent as one batch, in
// one round trip and one transaction, in this order: write the wake flag,
// resume due paused rows, settle verdicts, read the snapshot horizon, admit
// ingress, claim. Each part is optional, and the two lanes send different
// turns: the claim lane's write the wake flag, resume, read the horizon,
// admit and claim; the settle lane's settle, and for stages with KEY whose
// held keys the settle frees, claim after it (Caps, those keys no longer
// held), so that a key's next message goes out in the commit that freed
// it.
type Turn struct {
	Arm    Arm // the wake flag to write; ArmKeep: none
	Resume bool
	// Stages are the stages the dispatcher owns (nil: every stage): Resume
	// flips paused rows there only, and a settle that leaves rows pending
	// at any other stage notifies on the ingress channel (while a
	// dispatcher is armed), so that their owner claims them at once.
	Stages   []string
	Set      string // the dispatcher's set (SetName): the wake row Arm writes
	Settles  []Settle
	Snapshot bool // read the horizon of a snapshot taken just before the claim
	// Admit moves up to AdmitBatch messages from pepsi.ingress to pending
	// at their stages before the claim (after the snapshot: what committed
	// before it is admitted, and claimed if there is room).
	Admit bool
	Caps  []StageCap
	// Pass is the token the claim stamps on the passes it hands out
	// (pepsi.state.pass, sql/023_pass.sql): one no other claim has used
	// (PassTokens).
	Pass int64
	// Joins are messages whose joins to settle after the settle, besides
	// the parents of its verdicts (Settle.Parent) and the messages its
	// verdicts move to a join: those a stage moved to a join itself
	// (pepsi.join), found waiting by an earlier settle. JoinAll are the
	// stages whose JOIN_POLICY is all: at the others a parent fails as
	// soon as a child has failed.
	Joins   []int64
	JoinAll []string
	// Traced: the claim also reads each message's attempt and trace
	// context (Claimed.Attempt, Claimed.Trace).
	Traced bool
}

// Joined is a parent whose join was settled: released, pending at its
// join stage, or failed there (a child failed: JOIN_POLICY fail).
type Joined struct {
	ID     int64
	Stage  string
	Failed bool
}

// Arm is what a Turn writes to the wake flag (pepsi.wake.armed): whether
// producers notify.
type Arm uint8

// The wake flag writes.
const (
	ArmKeep Arm = iota // leave it
	ArmOn              // producers notify: the dispatcher waits for them
	ArmOff             // producers do not notify: the dispatcher polls
)

// TurnResult is what a Turn did. Its slices are reused by the next Turn
// given the same result.
type TurnResult struct {
	Resumed    int64
	Admitted   int64     // messages moved from pepsi.ingress (AdmitBatch: there may be more)
	NextPaused time.Time // zero: no paused row left (only set when Resume)
	Settled    []Settled
	Claimed    []Claimed
	Joined     []Joined // parents whose joins were settled after the settle
	// With Turn.Snapshot: the oldest transaction still running when the
	// snapshot was taken, and the first not yet started (pg_snapshot_xmin
	// and pg_snapshot_xmax); every transaction below Xmin has ended.
	Xmin, Xmax int64
	waits      []Claimed // the claim's scratch space
}

// armSQL writes the wake flag: the set's row of pepsi.wake (made again if
// it is gone: the table is unlogged, a crash empties it), and the count of
// armed sets that producers read (pepsi.wake_armed). Producers notify
// while any set is armed.
const armSQL = `SELECT pepsi.arm($2, $1)`

// AdmitBatch is the most messages a Turn admits from pepsi.ingress.
const AdmitBatch = 1000

// admitSQL moves messages from pepsi.ingress to pepsi.state.
const admitSQL = `SELECT pepsi.admit($1)`

// foreignSQL wakes the other dispatchers when the settle just made left
// rows pending at a stage this one does not own; it runs after the settle,
// in its transaction, so the notification is delivered at its commit. It
// notifies only while some dispatcher is armed: one that is not polls.
const foreignSQL = `SELECT pg_notify(s.ingress_channel, '') FROM pepsi.settings s
 WHERE pepsi.armed() AND EXISTS (SELECT 1 FROM pepsi.state t
        WHERE t.id = ANY($1::bigint[]) AND t.status = 'pending' AND NOT (t.stage = ANY($2::text[])))`

// snapshotSQL reads the horizon of a fresh snapshot (see TurnResult.Xmin).
const snapshotSQL = `SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint FROM pg_current_snapshot() s`

// localSQL returns the statement that sets a turn's transaction's
// settings, "" for none:
//   - generic plans for the settle and the claim, whose plans hold
//     whatever the statistics say (checkPlans): planned afresh for each
//     turn's arrays, as the server otherwise chooses at times, each would
//     cost more to plan than to run, at every turn;
//   - no sequential scans in a turn that claims (noSeqScan): a generic plan is
//     made once per connection, often while the queue is small (a new
//     database, a dispatcher started on an empty queue), where reading a
//     whole table is cheapest, and it keeps that choice as the backlog
//     grows. Each of the claim's reads has an index or TID path that costs
//     what it takes (claimUpdateSQL);
//   - a turn that settles nothing commits without waiting for its WAL
//     flush. What it writes (claims, resumes, admissions, the wake flag) is
//     safe to lose in a server crash, which loses with it everything that
//     followed: every stage's move of a claimed message commits after the
//     claim, and its flush covers the claim's. The claim's round trip is
//     then the server's work, not a disk flush, and workers are refilled
//     sooner. A settle's commit is waited for: the dispatcher forgets the
//     passes it settled.
//
// It goes just before the settle, or the claim when there is none, so
// that the resume before it keeps the plan chosen for its stages.
func localSQL(noSeqScan, generic, async bool) string {
	i := 0
	if noSeqScan {
		i |= 1
	}
	if generic {
		i |= 2
	}
	if async {
		i |= 4
	}
	return localSQLs[i]
}

// localSQLs holds localSQL's statements, by its arguments as bits.
var localSQLs = func() (all [8]string) {
	sets := []string{
		"set_config('enable_seqscan', 'off', true)",
		"set_config('plan_cache_mode', 'force_generic_plan', true)",
		"set_config('synchronous_commit', 'off', true)",
	}
	for i := 1; i < len(all); i++ {
		var on []string
		for bit, set := range sets {
			if i&(1<<bit) != 0 {
				on = append(on, set)
			}
		}
		all[i] = "SELECT " + strings.Join(on, ", ")
	}
	return all
}()

// SetArmed writes set's wake flag on its own.
func (db *DB) SetArmed(ctx context.Context, set string, on bool) error {
	if set == "" {
		set = AllStages
	}
	return Retry(ctx, func() error {
		_, err := db.execFenced(ctx, armSQL, on, set)
		return err
	})
}

// RunTurn sends t as one batch (one transaction, after the fence: see
// SetFence) and fills res.
func (db *DB) RunTurn(ctx context.Context, t Turn, res *TurnResult) error {
	claimStmt, claim := claimArgs(t.Caps, t.Pass)
	if t.Traced {
		claimStmt = traced(claimStmt)
	}
	hasClaim := claimStmt != ""
	local := localSQL(hasClaim, len(t.Settles) > 0 || hasClaim, len(t.Settles) == 0 && (hasClaim || t.Resume || t.Admit))
	var settle, history []any
	var foreign []int64
	if len(t.Settles) > 0 {
		settle = settleArgs(t.Settles)
		history = historyArgs(t.Settles)
		if t.Stages != nil {
			foreign = settle[0].([]int64)
		}
	}
	joins := joinIDs(t)
	joinAll := t.JoinAll
	if joinAll == nil {
		joinAll = []string{}
	}
	set := t.Set
	if set == "" {
		set = AllStages
	}
	r := turnReaders.Get().(*turnReader)
	defer r.release()
	r.res, r.pass = res, t.Pass
	return Retry(ctx, func() error {
		res.reset()
		// Each statement is queued with the read of its result, which
		// BatchResults.Close runs in order; a statement without one is
		// read for its error alone, and the first error ends the batch.
		b := r.batch()
		f := db.fence.Load()
		if f != nil {
			b.Queue(fenceSQL, f.token, f.stages)
		}
		if t.Arm != ArmKeep {
			b.Queue(armSQL, t.Arm == ArmOn, set)
		}
		if t.Resume {
			b.Queue(resumeSQL, t.Stages).QueryRow(r.resumed)
		}
		if local != "" && settle != nil {
			b.Queue(local)
		}
		if settle != nil {
			b.Queue(settleSQL, settle...).Query(r.settled)
		}
		if history != nil {
			b.Queue(historySQL, history...)
		}
		if foreign != nil {
			b.Queue(foreignSQL, foreign, t.Stages)
		}
		if joins != nil {
			b.Queue(joinsSQL, joins, joinAll).Query(r.joined)
		}
		if t.Snapshot {
			b.Queue(snapshotSQL).QueryRow(r.horizon)
		}
		if t.Admit {
			b.Queue(admitSQL, AdmitBatch).QueryRow(r.admitted)
		}
		if local != "" && settle == nil {
			b.Queue(local)
		}
		if hasClaim {
			b.Queue(claimStmt, claim...).Query(r.claimed)
		}
		if b.Len() == 0 || (f != nil && b.Len() == 1) {
			return nil
		}
		return db.pool.SendBatch(ctx, b).Close()
	})
}

// reset empties res for a turn (or its retry).
func (res *TurnResult) reset() {
	res.Resumed, res.Admitted, res.NextPaused, res.Xmin, res.Xmax = 0, 0, time.Time{}, 0, 0
	res.Settled, res.Claimed, res.Joined = res.Settled[:0], res.Claimed[:0], res.Joined[:0]
}

// turnReader holds what RunTurn reuses from turn to turn on the
// dispatcher's hot path: the batch's list of statements, and the reads of
// their results into res, bound once (a method value made per turn would
// be an allocation per turn).
type turnReader struct {
	res                        *TurnResult
	pass                       int64 // the claim's token
	b                          pgx.Batch
	resumed, horizon, admitted func(pgx.Row) error
	settled, claimed, joined   func(pgx.Rows) error
}

// turnReaders are the turnReaders not in use.
var turnReaders = sync.Pool{New: func() any {
	r := &turnReader{}
	r.resumed, r.horizon, r.admitted = r.readResumed, r.readHorizon, r.readAdmitted
	r.settled, r.claimed, r.joined = r.readSettled, r.readClaimed, r.readJoined
	return r
}}

// batch returns an empty batch on r's list of statements, emptied of the
// last batch's. The list is reused: pgx keeps nothing of a batch once its
// results are closed.
func (r *turnReader) batch() *pgx.Batch {
	q := r.b.QueuedQueries
	clear(q)
	r.b = pgx.Batch{QueuedQueries: q[:0]}
	return &r.b
}

// release puts r back, its list of statements emptied (their arguments
// would otherwise be kept alive).
func (r *turnReader) release() {
	r.batch()
	r.res = nil
	turnReaders.Put(r)
}

// The reads of a turn's results, each into its fields of res.

func (r *turnReader) readResumed(row pgx.Row) error {
	var next *time.Time
	if err := row.Scan(&r.res.Resumed, &next); err != nil {
		return err
	}
	if next != nil {
		r.res.NextPaused = *next
	}
	return nil
}

func (r *turnReader) readHorizon(row pgx.Row) error {
	return row.Scan(&r.res.Xmin, &r.res.Xmax)
}

func (r *turnReader) readAdmitted(row pgx.Row) error {
	return row.Scan(&r.res.Admitted)
}

func (r *turnReader) readSettled(rows pgx.Rows) (err error) {
	r.res.Settled, err = scanSettled(rows, r.res.Settled)
	return err
}

func (r *turnReader) readClaimed(rows pgx.Rows) (err error) {
	r.res.Claimed, r.res.waits, err = scanClaimed(rows, nil, r.res.Claimed, r.res.waits[:0], r.pass)
	return err
}

func (r *turnReader) readJoined(rows pgx.Rows) error {
	defer rows.Close()
	for rows.Next() {
		var j Joined
		if err := rows.Scan(&j.ID, &j.Stage, &j.Failed); err != nil {
			return err
		}
		r.res.Joined = append(r.res.Joined, j)
	}
	return rows.Err()
}
