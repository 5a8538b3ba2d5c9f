package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// StageCap is how many more messages a stage can take.
type StageCap struct {
	Stage string
	Cap   int
	// KeyLimit, at a stage with KEY, is the most messages of one key in
	// flight there (0: no KEY); Held counts those the dispatcher holds now,
	// by key.
	KeyLimit int
	Held     []HeldKey
}

// HeldKey is a key with messages in flight at a stage, and how many.
type HeldKey struct {
	Key string
	N   int
}

// Claimed is a message the claim moved from pending to running.
type Claimed struct {
	ID       int64
	Stage    string
	Priority int32   // its priority: handed out in (priority, id) order
	Waited   float64 // seconds it was pending before the claim
	Key      string  // its key at a stage with KEY, when Keyed
	Keyed    bool    // it has a key there (the message has the KEY header)
	Pass     int64   // the pass's token (the claim's: Turn.Pass)
	Parent   int64   // the message that spawned it (0: none): its end may release its parent's join
	Attempt  int32   // its attempt at the stage, counting this one (Turn.Traced only)
	Trace    string  // its traceparent and tracestate headers, blank-separated (Turn.Traced only)
}

// claimSQL takes, for each stage, up to its cap of pending rows in
// priority order, ingress order within a priority: the LATERAL subquery walks state_pending and stops at the cap.
// A stage in pepsi.paused_stages (pepsi queue pause) gets nothing (pausedCap).
// The dispatcher is the only pending→running writer, so no row locks are
// needed beyond the UPDATE's own.
//
// Every step has one plan whatever the statistics say (a fresh database
// has none, and the planner's guesses for the caps and the pick are
// wrong either way):
//   - the UPDATE finds the picked row versions by ctid (a TID scan: no
//     index descent, no join with the pick that the planner could hash
//     against a sequential scan of the whole table); a row that changed
//     since the pick is re-checked against status = 'pending' and its
//     latest version taken or skipped;
//   - the result is the pick (id, wait) and the UPDATE's rows (id, stage
//     as it is now) side by side, not joined: a join of two CTEs whose
//     sizes the planner cannot know becomes a nested loop comparing every
//     pair on a database without statistics. scanClaimed matches the two
//     by id.
var claimSQL = strings.Replace(`
WITH picked AS (`+claimPickSQL+claimUpdateSQL, "$PASS", "$3::bigint", 1)

// claimPickSQL is the claim's pick at the stages $1 with caps $2.
const claimPickSQL = `
    SELECT p.ctid, p.id, p.updated_at
      FROM unnest($1::text[], $2::int[]) AS c(stage, cap)
     CROSS JOIN LATERAL (
           SELECT s.ctid, s.id, s.updated_at FROM pepsi.state_live s
            WHERE s.status = 'pending' AND s.stage >= c.stage AND s.stage <= c.stage
            ORDER BY s.stage, s.priority, s.id
            LIMIT ` + pausedCap + `) p
`

// pausedCap is a stage's cap in the claim: 0 while it is paused. The check
// is a LIMIT, evaluated once per stage before its walk, rather than an
// anti-join of the stages with pepsi.paused_stages, which changes the plan
// the claim is given and slowed the no-op pipeline by a third.
const pausedCap = `CASE WHEN EXISTS (SELECT FROM pepsi.paused_stages x WHERE x.stage = c.stage) THEN 0 ELSE c.cap END`

// claimUpdateSQL is the claim's second half: the picked rows to running,
// found by their ctids. The claim runs on a generic plan, often made while
// the queue is small, where reading a whole table looks cheapest; its test
// that a row is still pending compares with an init-plan's value, which no
// partial index's predicate matches, so that with sequential scans off
// (localSQL) the TID scan is the one path left, whatever the table's size
// when the plan was made.
const claimUpdateSQL = `), upd AS (
    UPDATE pepsi.state_live s
       SET status = 'running', attempts = s.attempts + 1, updated_at = now(), handed = s.stage, pass = $PASS
     WHERE s.ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND s.status = (SELECT 'pending')
    RETURNING s.id, s.stage, s.priority, s.flow_key, coalesce(s.parent, 0) AS parent
)
SELECT id, '', 0, NULL::text, extract(epoch FROM clock_timestamp() - updated_at)::float8, 0::bigint FROM picked
UNION ALL
SELECT id, stage, priority, flow_key, 0, parent FROM upd`

// claimKeyedSQL is claimSQL with stages that have KEY ($3 to $6): there
// a message of key k is taken only while the messages of k in flight (the
// dispatcher's count: $6, per stage a JSON object of key → messages held)
// and the earlier messages of k pending, paused or held at the stage are
// together fewer than KEY_LIMIT. With KEY_LIMIT = 1 that is: k is not held
// and this is its earliest unfinished message there, so a key's messages
// pass one at a time in ingress order, and a paused retry (or a held
// message) holds its key's place. Messages without a key pass freely.
//
// A keyed stage's claim costs what it can take, not its backlog:
//   - walk: the first 2 × cap + 16 pending rows in (priority, id) order,
//     each checked with one probe of state_flow until cap have passed.
//     Where keys are many, the cap is found here;
//   - heads: when the window was full and the walk found less than its
//     cap (a backlog of a few keys, most of them held), a skip over the
//     distinct keys of state_flow (one descent a key, at most 10 000 keys)
//     takes each key's first KEY_LIMIT unfinished messages, less those it
//     has in flight, and keeps the pending ones.
//
// The two are merged in (priority, id) order up to the cap. A message
// without a key behind more than the window of keyed ones waits until the
// backlog ahead of it is shorter than the window.
var claimKeyedSQL = strings.Replace(`
WITH picked AS (`+claimPickSQL+`    UNION ALL
    SELECT p.ctid, p.id, p.updated_at
      FROM unnest($3::text[], $4::int[], $5::int[], $6::jsonb[]) AS c(stage, cap, lim, held)
     CROSS JOIN LATERAL (
        WITH win AS MATERIALIZED (
            SELECT s.ctid, s.id, s.updated_at, s.priority, s.flow_key FROM pepsi.state_live s
             WHERE s.status = 'pending' AND s.stage >= c.stage AND s.stage <= c.stage
             ORDER BY s.stage, s.priority, s.id
             LIMIT 2 * c.cap + 16
        ), walk AS MATERIALIZED (
            SELECT s.ctid, s.id, s.updated_at, s.priority FROM win s
             WHERE s.flow_key IS NULL OR CASE WHEN c.lim = 1 THEN
                     NOT c.held ? s.flow_key
                     AND NOT EXISTS (SELECT FROM pepsi.state_live e
                                      WHERE e.stage = c.stage AND e.flow_key = s.flow_key AND e.id < s.id
                                        AND e.status IN ('pending', 'paused', 'held'))
                   ELSE
                     coalesce((c.held ->> s.flow_key)::int, 0) + (SELECT count(*) FROM (
                         SELECT FROM pepsi.state_live e
                          WHERE e.stage = c.stage AND e.flow_key = s.flow_key AND e.id < s.id
                            AND e.status IN ('pending', 'paused', 'held')
                          LIMIT c.lim) e) < c.lim
                   END
             LIMIT c.cap -- win is in (priority, id) order: the first cap that pass are the best
        ), heads AS (
            WITH RECURSIVE k(key, n) AS (
                SELECT (SELECT e.flow_key FROM pepsi.state_live e
                         WHERE e.stage = c.stage AND e.flow_key IS NOT NULL AND e.status IN ('pending', 'paused', 'held')
                         ORDER BY e.stage, e.flow_key LIMIT 1), 1
                 WHERE (SELECT count(*) FROM walk) < c.cap AND (SELECT count(*) FROM win) > 2 * c.cap + 15
              UNION ALL
                SELECT (SELECT e.flow_key FROM pepsi.state_live e
                         WHERE e.stage = c.stage AND e.flow_key > k.key AND e.flow_key IS NOT NULL
                           AND e.status IN ('pending', 'paused', 'held')
                         ORDER BY e.stage, e.flow_key LIMIT 1), k.n + 1
                  FROM k WHERE k.key IS NOT NULL AND k.n < 10000
            )
            SELECT h.ctid, h.id, h.updated_at, h.priority FROM k
             CROSS JOIN LATERAL (
                 SELECT e.ctid, e.id, e.updated_at, e.priority, e.status FROM pepsi.state_live e
                  WHERE e.stage = c.stage AND e.flow_key = k.key AND e.status IN ('pending', 'paused', 'held')
                  ORDER BY e.stage, e.flow_key, e.id
                  LIMIT greatest(c.lim - coalesce((c.held ->> k.key)::int, 0), 0)) h
             WHERE k.key IS NOT NULL AND h.status = 'pending'
        )
        SELECT u.ctid, u.id, u.updated_at FROM (SELECT * FROM walk UNION SELECT * FROM heads) u
         ORDER BY u.priority, u.id
         LIMIT `+pausedCap+`) p -- paused: 0, and the walk is never run
`+claimUpdateSQL, "$PASS", "$7::bigint", 1)

// Claim moves pending rows to running on q, each stage up to its cap, and
// appends them to dst (in no defined order). q may be a transaction of the
// caller's, which sees the claim undone if it rolls back (pepsi bench
// times the claim so); a transient failure is returned, not retried. The
// dispatcher claims with RunTurn.
func Claim(ctx context.Context, q Querier, caps []StageCap, dst []Claimed) ([]Claimed, error) {
	pass := claimPasses.Add(1)
	sql, args := claimArgs(caps, pass)
	if sql == "" {
		return dst, nil
	}
	rows, err := q.Query(ctx, sql, args...)
	dst, _, err = scanClaimed(rows, err, dst, nil, pass)
	return dst, err
}

// claimPasses numbers Claim's passes: tokens of their own (the clock's
// nanoseconds at start, above any dispatcher's, which count from 2^40).
var claimPasses = func() *atomic.Int64 {
	var n atomic.Int64
	n.Store(time.Now().UnixNano())
	return &n
}()

// GenericPlans makes the rest of transaction tx run its statements on
// their generic plans without sequential scans, as the dispatcher runs
// its claims (RunTurn): for a caller that times a claim as the dispatcher
// does.
func GenericPlans(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, localSQL(true, true, false))
	return err
}

// claimArgs returns the claim statement and its arguments: claimSQL while
// no stage with a cap has KEY, claimKeyedSQL otherwise; "" when no stage
// has a cap.
func claimArgs(caps []StageCap, pass int64) (string, []any) {
	stages := make([]string, 0, len(caps))
	limits := make([]int32, 0, len(caps))
	var keyed, keyCaps, keyLimits []int32
	n := 0
	for i, c := range caps {
		switch {
		case c.Cap <= 0:
		case c.KeyLimit > 0:
			keyed = append(keyed, int32(i))
			n++
		default:
			stages = append(stages, c.Stage)
			limits = append(limits, int32(c.Cap))
			n++
		}
	}
	if n == 0 {
		return "", nil
	}
	if keyed == nil {
		return claimSQL, []any{stages, limits, pass}
	}
	var keyStages, held []string
	for _, i := range keyed {
		c := &caps[i]
		keyStages = append(keyStages, c.Stage)
		keyCaps = append(keyCaps, int32(c.Cap))
		keyLimits = append(keyLimits, int32(c.KeyLimit))
		held = append(held, heldJSON(c.Held))
	}
	return claimKeyedSQL, []any{stages, limits, keyStages, keyCaps, keyLimits, held, pass}
}

// heldJSON writes held as claimKeyedSQL's JSON object, key → count.
func heldJSON(held []HeldKey) string {
	b := make([]byte, 0, 16*len(held)+2)
	b = append(b, '{')
	for i, h := range held {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(h.Key) // a string always marshals
		b = append(b, k...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(h.N), 10)
	}
	return string(append(b, '}'))
}

// scanClaimed reads claimSQL's rows, claimed with token pass: the claimed
// rows are appended to dst and the pick's waits, gathered in waits
// (scratch space, returned for reuse), are matched to them by id. Both are
// left sorted by id.
func scanClaimed(rows pgx.Rows, err error, dst, waits []Claimed, pass int64) ([]Claimed, []Claimed, error) {
	if err != nil {
		return dst, waits, err
	}
	defer rows.Close()
	start := len(dst)
	for rows.Next() {
		var c Claimed
		var key *string // nil, no allocation, for a message without a key
		if err := scanClaim(rows, &c, &key); err != nil {
			return dst, waits, err
		}
		if key != nil {
			c.Key, c.Keyed = *key, true
		}
		c.Pass = pass
		if c.Stage == "" { // a picked row: its wait (stage names are never empty)
			waits = append(waits, c)
			continue
		}
		dst = append(dst, c)
	}
	if err := rows.Err(); err != nil {
		return dst, waits, err
	}
	claimed := dst[start:]
	byID := func(a, b Claimed) int { return cmp.Compare(a.ID, b.ID) }
	slices.SortFunc(claimed, byID)
	slices.SortFunc(waits, byID)
	j := 0
	for i := range claimed {
		for j < len(waits) && waits[j].ID < claimed[i].ID {
			j++
		}
		if j < len(waits) && waits[j].ID == claimed[i].ID {
			claimed[i].Waited = waits[j].Waited
		}
	}
	return dst, waits, nil
}

// Verdict is what the dispatcher concluded about one handed-out message:
// how its pass ended and, for a pass whose stage answered the move on its
// status line, the move.
//
// The words are pepsi's one vocabulary. A pass (one stage's work on a
// message) ends ok (answered 0) or failed (answered non-zero; or, as the
// metrics tell apart, timed out, crashed, broke the protocol), or the
// message was not run at all. A move is what happens to the message:
// advance (to another stage), finish (done), pause (retry the stage
// later) or fail (dead-letter it: failed, with a reason). A pass that moves its message to failed is ok; a
// failed pass is retried while RETRIES allow, and then fails the message.
type Verdict string

// The verdicts a settle applies (Turn.Settles).
const (
	// PassOK: the stage answered 0 and made its move itself.
	PassOK Verdict = "ok"
	// PassFailed: the pass failed (non-zero answer, crash, timeout,
	// protocol error): retried after a pause while the stage's RETRIES
	// allow, then the message fails.
	PassFailed Verdict = "failed"
	// NotRun: the message was never run (or the dispatcher is stopping, or
	// the stage could not reach its database): back to pending, or paused
	// for Settle.Delay when it is set, the claim's attempt taken back.
	NotRun Verdict = "notrun"
	// Advance: the pass was ok, moving the message on to Settle.Next.
	Advance Verdict = protocol.AdvanceName
	// Finish: the pass was ok, finishing the message.
	Finish Verdict = protocol.FinishName
	// Pause: the pass was ok, pausing the message for Settle.Delay.
	Pause Verdict = protocol.PauseName
	// Join: the pass was ok, moving the message to wait at the join stage
	// Settle.Next until its children have ended.
	Join Verdict = protocol.JoinName
)

// notMoved is the dispatch_error of a message whose stage answered 0
// without moving it.
const notMoved = "stage reported success but did not move the message"

// Settle is one message's verdict, with the stage it was handed at.
type Settle struct {
	ID      int64
	Stage   string
	Pass    int64 // the pass's token, as the claim stamped it (Claimed.Pass)
	Verdict Verdict
	Reason  string        // for PassFailed, and NotRun when set: the dispatch_error
	Retry   RetryPolicy   // for PassFailed: pause instead while attempts are left
	Next    string        // for Advance: the stage to advance to; for Join: the join stage
	Delay   time.Duration // for Pause, and NotRun when set: how long to pause
	Kind    FailKind      // for PassFailed: how the pass failed, for the history
	PID     int32         // for PassFailed: the worker's process id, for the history
	Parent  int64         // the message that spawned it (Claimed.Parent): its join is settled after
}

// RetryPolicy says how often and how late a failed pass is retried.
type RetryPolicy struct {
	Retries int           // failed passes at one stage that are retried; 0: none
	Delay   time.Duration // the first retry's delay, doubled for each later one
	Max     time.Duration // the longest delay
}

// Outcome is how a settle books a pass in the statistics: each pass
// claimed is booked once, as exactly one of these.
type Outcome byte

// The outcomes, as pepsi.state.ended_as spells them (sql/023_pass.sql).
const (
	OutRequeued  Outcome = 'q' // pending at another stage: it advanced
	OutReset     Outcome = 'r' // pending at its stage again: not run, or its claim was lost
	OutPaused    Outcome = 'p' // paused: a retry, a pause, a not-run with a delay
	OutDone      Outcome = 'd'
	OutFailed    Outcome = 'f'
	OutCancelled Outcome = 'c' // a person cancelled it while it ran
)

// Settled is what a settle found and did for one message.
type Settled struct {
	ID      int64
	Before  Status    // its status when the settle read it: running, unless its stage (or a person) moved it on first
	After   Status    // its status after the settle: Before when the settle left it alone
	Stage   string    // the stage it is at after the settle
	Handed  string    // the stage it was handed at
	Timeout time.Time // when a paused row falls due
	Outcome Outcome   // how the pass is booked
	Parent  int64     // the message that spawned it (0: none)
}

// Changed reports whether the settle wrote the row: it was still running
// this pass.
func (s *Settled) Changed() bool { return s.Before == Running && s.After != Running }

// Requeued reports whether the row is pending after the settle: the settle
// put it back, or its stage had requeued it first (pepsi.advance).
func (s *Settled) Requeued() bool {
	return s.After == Pending && (s.Changed() || s.Before == Pending)
}

// settleSQL applies verdicts in one statement. Each verdict is of one
// pass, known by its token (pass): only a row still running that pass is
// written. At another stage than it was handed at, the row advanced and
// goes back to pending whatever the verdict (its attempts start again at
// 0). At the same stage:
//   - ok: the stage answered 0 without moving it: failed, notMoved;
//   - advance, finish, pause: the move the stage answered is made;
//   - notrun: it never ran: pending (paused for delay when it is set),
//     the claim's attempt taken back, its dispatch_error the reason when
//     there is one (a stage's answer 75: why it was not run);
//   - failed: failed with the reason, or paused for delay × 2^(attempts-1)
//     (at most maxdelay) while retries are left.
//
// Every verdict is booked once (Outcome): the settle writes the outcome it
// booked and the pass into the row (ended, ended_as), so that a settle
// sent again after its answer was lost books what its first sending did,
// even if the row was claimed again since. A pass the stage (or a person)
// ended first is booked by the row's status, and its row stamped the same
// way; one a person cancelled was stamped by the cancel, one the stage
// advanced by pepsi.advance(), which requeues the row itself. A row
// claimed again since and stamped by a later pass, where this pass's stage
// answered 0, was requeued by it: only a requeue lets a row be claimed
// before its pass is settled. A verdict of a pass the row never ran (its
// claim was lost in a server crash: claims commit without waiting for
// their flush) is booked reset, and the row left alone.
//
// A row of this pass that the stage paused (or that a person held or
// released since) is handed out until its pass is settled: the resume
// leaves it alone, so that a short pause is never claimed again before
// the pass that paused it is settled. The settle clears handed (unhand:
// its rows are found by an array of ids, a probe of the primary key each,
// whatever the planner guesses of cur), and books the pass paused: only
// the stage's pause leaves a row of its pass live and not running.
//
// cur locks the unfinished rows of its passes first, one primary-key
// lookup of state_live per verdict (the locking subquery is not flattened
// into a join that could scan the table), and reads them as locked, so
// that what it reports and decides is their latest committed state even
// when a stage's commit lands while this runs. Which rows it locks it
// decides by their version in the statement's snapshot (o), read first:
// not those a stage requeued (pending) or that run another pass since,
// which this settle never writes (a lock would hold up the next stage's
// claim, or that stage's own move, until this settle commits); the ids
// not in state_live (a stage finished them: they moved to another
// partition) are looked up in the others, and read unlocked. The lock's
// condition is on the snapshot's version, not the locked one, so that a
// row that a stage's commit requeues while cur waits for its lock is read
// as that commit left it. A row moved to another partition while cur
// waited for its lock fails the statement (SQLSTATE 40001), which RunTurn
// runs again. The result is upd's rows and cur's others: no join of the
// two, whose sizes the planner cannot know (it guesses one row and
// compares every pair). upd finds its rows by primary key from cur, with
// s.id = ANY (ARRAY[x.id]) rather than s.id = x.id: that one can only be a
// probe of the primary key per row of cur, never a merge or a walk of the
// whole index in id order, which the planner chooses when statistics say
// state_live is empty (docs/design.md, "Claim and settle"). upd has no
// condition of its own on s.status but the partition's (which keeps it to
// state_live; an UPDATE through pepsi.state moves a row it makes done or
// failed): cur holds their locks and read their latest version, which is
// the one upd changes. A condition such as s.status = 'running' lets the
// planner start from state_running (a few rows, it guesses) and scan cur
// once per row.
const settleSQL = `
WITH cur AS (
    SELECT x.*,
           CASE WHEN x.advanced OR x.verdict = 'advance' OR x.verdict = 'notrun' AND x.delay = 0 THEN 'pending'
                WHEN x.verdict = 'join' THEN 'waiting'
                WHEN x.verdict = 'finish' THEN 'done'
                WHEN x.verdict IN ('pause', 'notrun') OR x.retry THEN 'paused'
                ELSE 'failed' END AS next
      FROM (
    SELECT v.id, v.stage AS handed, v.pass, v.verdict, v.reason, v.delay, v.maxdelay, v.target,
           coalesce(l.status, o.status, f.status) AS status, coalesce(l.stage, o.stage, f.stage) AS stage,
           coalesce(l.timeout, o.timeout, f.timeout) AS timeout, l.attempts, coalesce(l.parent, o.parent, f.parent, 0) AS parent,
           coalesce(l.pass, o.pass, f.pass) = v.pass AS mine,
           CASE WHEN coalesce(l.ended, o.ended, f.ended) = v.pass AND v.pass <> 0 THEN coalesce(l.ended_as, o.ended_as, f.ended_as) END AS booked,
           l.handed IS NOT NULL AS unhand,
           coalesce(l.stage, o.stage, f.stage) <> v.stage AS advanced,
           v.verdict = 'failed' AND greatest(l.attempts, 1) <= v.retries AS retry
      FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[], $7::float8[], $8::text[], $9::bigint[])
           AS v(id, stage, verdict, reason, retries, delay, maxdelay, target, pass)
      LEFT JOIN LATERAL (
           SELECT s.status, s.stage, s.timeout, s.pass, s.ended, s.ended_as, s.parent FROM pepsi.state_live s
            WHERE s.id = v.id) o ON true
      LEFT JOIN LATERAL (
           SELECT s.status, s.stage, s.timeout, s.attempts, s.handed, s.pass, s.ended, s.ended_as, s.parent FROM pepsi.state_live s
            WHERE s.id = v.id AND o.status <> 'pending' AND (o.status <> 'running' OR o.pass = v.pass) FOR UPDATE) l ON true
      LEFT JOIN LATERAL (
           SELECT s.status, s.stage, s.timeout, s.pass, s.ended, s.ended_as, s.parent FROM pepsi.state s
            WHERE s.id = v.id AND o.status IS NULL AND s.status IN ('done', 'failed', 'cancelled')
           OFFSET 0) f ON true -- not flattened: o.status IS NULL gates each partition's probe
     WHERE l.status IS NOT NULL OR o.status IS NOT NULL OR f.status IS NOT NULL) x
), upd AS (
    UPDATE pepsi.state s
       SET status = x.next,
           stage = CASE WHEN NOT x.advanced AND x.verdict IN ('advance', 'join') THEN x.target ELSE s.stage END,
           timeout = CASE WHEN x.advanced THEN s.timeout
                          WHEN x.verdict = 'join' THEN NULL
                          WHEN x.verdict IN ('pause', 'notrun') THEN now() + make_interval(secs => x.delay)
                          WHEN x.retry THEN now() + make_interval(secs => least(x.delay * 2 ^ greatest(x.attempts - 1, 0), x.maxdelay))
                          ELSE s.timeout END,
           attempts = CASE WHEN x.advanced OR x.verdict IN ('advance', 'join') THEN 0
                           WHEN x.verdict = 'notrun' THEN greatest(s.attempts - 1, 0)
                           ELSE s.attempts END,
           dispatch_error = CASE WHEN x.advanced OR x.verdict IN ('advance', 'finish', 'pause', 'join') OR x.verdict = 'notrun' AND x.reason = ''
                                 THEN s.dispatch_error
                                 WHEN x.verdict = 'ok' THEN '` + notMoved + `'
                                 ELSE x.reason END,
           flow_key = CASE WHEN NOT (x.advanced OR x.verdict IN ('advance', 'join')) THEN s.flow_key
                           WHEN (SELECT EXISTS (SELECT FROM pepsi.flow_keys)) -- once a statement
                           THEN ` + FlowKeyAt + `CASE WHEN x.advanced THEN s.stage ELSE x.target END)
                           END,
           updated_at = now(), handed = NULL, ended = x.pass,
           ended_as = CASE x.next WHEN 'pending' THEN CASE WHEN x.advanced OR x.verdict = 'advance' AND x.target <> x.handed
                                                           THEN 'q' ELSE 'r' END
                                  WHEN 'waiting' THEN 'q'
                                  ELSE left(x.next, 1) END::"char"
      FROM cur x
     WHERE s.id = ANY (ARRAY[x.id]) AND x.status = 'running' AND x.mine AND s.status IN ('pending', 'running', 'paused')
    RETURNING s.id, s.stage, x.handed, s.status, s.timeout, s.ended_as, x.parent
), unhand AS (
    UPDATE pepsi.state_live s SET handed = NULL, ended = s.pass,
           ended_as = CASE WHEN s.ended = s.pass THEN s.ended_as WHEN s.status = 'waiting' THEN 'q' ELSE 'p' END
     WHERE s.id = ANY (ARRAY(SELECT x.id FROM cur x WHERE x.mine AND x.status <> 'running' AND x.unhand))
)
SELECT id, 'running', stage, handed, status, timeout, ended_as, parent FROM upd
UNION ALL
SELECT id, status, stage, handed, status, timeout,
       coalesce(booked, CASE WHEN NOT mine AND verdict = 'ok' THEN 'q'
                             WHEN NOT mine THEN 'r'
                             WHEN status IN ('done', 'failed', 'cancelled') THEN left(status, 1)
                             WHEN status = 'waiting' THEN 'q'
                             ELSE 'p' END::"char"), parent
  FROM cur WHERE NOT (status = 'running' AND mine)`

// settleArgs returns settleSQL's arguments: one array per column.
func settleArgs(vs []Settle) []any {
	n := len(vs)
	ids, stages, verdicts, reasons := make([]int64, n), make([]string, n), make([]string, n), make([]string, n)
	retries, delays, maxes, targets := make([]int32, n), make([]float64, n), make([]float64, n), make([]string, n)
	passes := make([]int64, n)
	for i, v := range vs {
		ids[i], stages[i], verdicts[i], reasons[i], passes[i] = v.ID, v.Stage, string(v.Verdict), v.Reason, v.Pass
		retries[i], delays[i], maxes[i] = int32(v.Retry.Retries), v.Retry.Delay.Seconds(), v.Retry.Max.Seconds()
		switch v.Verdict {
		case Advance, Join:
			targets[i] = v.Next
		case Pause, NotRun:
			delays[i] = v.Delay.Seconds()
		}
	}
	return []any{ids, stages, verdicts, reasons, retries, delays, maxes, targets, passes}
}

// scanSettled reads settleSQL's rows, appended to dst.
func scanSettled(rows pgx.Rows, dst []Settled) ([]Settled, error) {
	defer rows.Close()
	for rows.Next() {
		var s Settled
		var before, after string
		var timeout *time.Time
		var out byte
		if err := rows.Scan(&s.ID, &before, &s.Stage, &s.Handed, &after, &timeout, &out, &s.Parent); err != nil {
			return dst, err
		}
		s.Before, s.After, s.Outcome = Status(before), Status(after), Outcome(out)
		if timeout != nil {
			s.Timeout = *timeout
		}
		dst = append(dst, s)
	}
	return dst, rows.Err()
}

// ResetRunning puts every running row handed out at stages back to
// pending (orphans of a dispatcher of those stages that is gone, wherever
// their stage programs advanced them; no stages: every running row) and
// returns how many it reset. The paused rows of those passes are made
// resumable (their pass will never be settled).
func (db *DB) ResetRunning(ctx context.Context, stages ...string) (int64, error) {
	var n int64
	err := Retry(ctx, func() error {
		tag, err := db.execFenced(ctx, `WITH unhand AS (
			UPDATE pepsi.state SET handed = NULL
			 WHERE status = 'paused' AND handed IS NOT NULL AND ($1::text[] IS NULL OR handed = ANY($1)))
			UPDATE pepsi.state s SET status = 'pending', updated_at = now(), handed = NULL,
			flow_key = `+flowKeyHere+`
			WHERE status = 'running' AND ($1::text[] IS NULL OR `+HandedAt+` = ANY($1))`, stages)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// FlowKeyAt, followed by a stage (an SQL expression) and ")", is the key
// the message of pepsi.state s has at that stage (see sql/008_flow_key.sql):
// every statement that makes a row pending at a new stage sets it so
// (pkg/admin's redrive too).
const FlowKeyAt = `(SELECT pepsi.flow_key(m.headers ->> k.header) FROM pepsi.flow_keys k, pepsi.message m
                  WHERE m.id = s.id AND k.stage = `

// flowKeyHere is the key of row s at its own stage: the resets set it,
// since a stage program may have moved the row on before it was orphaned.
const flowKeyHere = FlowKeyAt + `s.stage)`

// HandedAt is the stage a running row of pepsi.state was handed out at
// (an SQL expression): its owner's.
const HandedAt = "coalesce(handed, stage)"

// resumeSQL flips due paused rows at the stages $1 (NULL: every stage) to
// pending and returns how many, and when the next paused row there falls
// due. A row whose pass is not settled yet (handed: see settleSQL) waits
// for its settle, which reports when it falls due. A scheduled message
// (never run at its stage: attempts 0) gets its flow key now, as it
// becomes pending (sql/functions/20_enqueue.sql). The next due time of a
// stage set is read per stage (state_paused_stage): in state_paused's
// order it would walk past every paused row of the other sets' stages.
// The stage is a range, as in the claim, so that the planner cannot take
// state_paused's order for the order asked for (with p.stage = st.stage
// it did, guessing that half of its entries are of the stage).
const resumeSQL = `
WITH due AS (
    UPDATE pepsi.state s SET status = 'pending', timeout = NULL, updated_at = now(),
           flow_key = CASE WHEN s.flow_key IS NULL AND s.attempts = 0 THEN ` + flowKeyHere + ` ELSE s.flow_key END
     WHERE status = 'paused' AND timeout <= now() AND handed IS NULL AND ($1::text[] IS NULL OR stage = ANY($1))
    RETURNING id
)
SELECT (SELECT count(*) FROM due),
       CASE WHEN $1::text[] IS NULL
            THEN (SELECT min(timeout) FROM pepsi.state WHERE status = 'paused' AND timeout > now())
            ELSE (SELECT min(n.timeout) FROM unnest($1::text[]) AS st(stage) CROSS JOIN LATERAL (
                      SELECT p.timeout FROM pepsi.state_live p
                       WHERE p.status = 'paused' AND p.stage >= st.stage AND p.stage <= st.stage AND p.timeout > now()
                       ORDER BY p.stage, p.timeout LIMIT 1) n) END`
