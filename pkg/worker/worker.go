// Package worker writes pepsi stage programs in Go: the stage side of the
// worker protocol (pepsi-worker(7), SPEC §4) around one function.
//
// A stage is a Func and a call to Main:
//
//	func main() {
//		worker.Main(func(ctx context.Context, m *worker.Message) (worker.Move, error) {
//			if _, err := m.Tx.Exec(ctx, "INSERT INTO seen (id) VALUES ($1)", m.ID); err != nil {
//				return worker.Move{}, err
//			}
//			return worker.Advance("deliver"), nil
//		})
//	}
//
// Main reads -c FILE (the dispatcher appends it to PROGRAM), loads that
// configuration, connects to the database once (PEPSI_DSN, which the
// dispatcher sets, or the configured DSN) and then serves message ids from
// stdin until EOF. For each id it begins a transaction, reads the message,
// checks that it is running, and calls the function with the message and
// the transaction. The function does its work in m.Tx and returns what
// should become of the message:
//
//	worker.Advance(stage)  on to another stage (the dispatcher requeues it)
//	worker.Finish()        done
//	worker.Pause(d)        paused; the dispatcher retries it at this stage after d
//	worker.Fail(reason)    failed, with reason in the row's error column
//	worker.Join(stage)     waits at stage until its children have ended
//
// FinishWith(result) is Finish leaving a result for the message's
// parent's join to read. The move is made with the SQL API (pepsi.advance,
// pepsi.finish, pepsi.pause, pepsi.fail, pepsi.join) in the same transaction, which is then committed,
// and only then is the status line "0" written. If the function returns an
// error (or panics), the transaction is rolled back, the error is logged to
// stderr and the answer is "1 # error text": the dispatcher then marks the
// message failed with that text in dispatch_error. Serialization failures
// and deadlocks (SQLSTATE 40001, 40P01) are retried, up to three passes, so
// the function may run more than once for a message — as it may anyway,
// since delivery is at-least-once: write it to be idempotent.
//
// A pass that ran other stages' work in the same process reports them with
// Message.Fused; they are put on the status line for the dispatcher to book.
//
// Each pass is fenced by its pass token. A dispatcher that speaks protocol
// version 2 says so in the environment (PEPSI_PROTOCOL=2); Main then
// writes the hello line "hello token" before anything else, and from then
// on each id comes with the token of its pass ("ID TOKEN", m.Pass). The
// move presents it (pepsi.advance(id, stage, token) and so on), and the
// server refuses it (SQLSTATE 55000) unless the message is running that
// very pass: a pass the dispatcher has given up (timed out, its worker
// killed, the message claimed again since) cannot move the message, and
// its work is rolled back with the refused move. The read of such a pass
// takes no lock, and finds out at once when the pass is over already (the
// function is not called). An id without a token (an older dispatcher, or
// one written before the dispatcher read the hello) is read with its queue
// row locked (SELECT … FOR UPDATE), so that the dispatcher's settle of a
// timed-out pass waits for the pass to end; its move is fenced by the
// message's status alone.
//
// Exit status: 0 at EOF on stdin and after SIGTERM or SIGINT (a stop that
// was asked for); 1 when the database cannot be reached or the connection
// is lost (the message in hand is answered first), or stdout breaks; 2 for
// a usage or configuration error. On SIGTERM the message in hand is rolled
// back and left unanswered — the dispatcher, which is what sends SIGTERM,
// puts it back in the queue — and the program exits at once.
//
// A stage whose work happens outside the database (a call to another
// service, a file written) need not pay a commit per message: with
// MainOnStatusLine (Options.Mode = OnStatusLine) the function runs outside
// any transaction, m.Tx is nil, and its move goes on the status line —
// "0 next:deliver", "0 done", "0 pause:30", "0 join:invoice" — for the
// dispatcher to apply in the batched statements it runs anyway. Only m.ID
// and m.Stage are known up front; m.Load reads the payload and the rest
// when the stage needs them. worker.Fail is still carried out by the stage
// itself (pepsi.fail), so that a dead letter keeps its reason, and so is
// FinishWith (pepsi.finish), whose result the status line has no room
// for. Without a transaction a stage spawns no children.
//
// A stage whose work is statements that need no answer can have each
// pass in one round trip: with MainOneTrip (Options.Mode = OneTrip) the
// function runs first, with m.Tx nil and only m.ID and m.Stage known, and
// queues its statements with m.Queue; BEGIN, those statements, the move
// and COMMIT then go out in one batch. The queue row is not read and
// locked first: the move locks it, and refuses a message that is no
// longer running (with a token: no longer running this pass), which rolls
// the work back with it.
//
// Behind a connection pooler in transaction mode (PgBouncer's pool_mode =
// transaction, with fewer server connections than workers) a stage works
// as it does on a direct connection: each message's pass is one
// transaction, and Main keeps no session state between them (no SET, no
// session advisory lock, no LISTEN, no temporary table). Statements are
// not prepared there: the connection finds out at start whether it is
// PostgreSQL's own session and, when it is not, sends every statement with
// pgx's QueryExecModeExec (parsed and run in one round trip, nothing left
// on the server) instead of the statement cache pgx uses by default, whose
// prepared statements would be missing on the next transaction's server
// connection. A DSN that names default_query_exec_mode keeps that mode. A
// stage that does work in m.Tx should do the same: no SET without LOCAL,
// nothing kept on the session from one message to the next.
//
// A stage may fan a message out: Message.Spawn and SpawnMany make its
// children in the pass's transaction, and the move Join(stage) parks it,
// waiting, until every child has ended; the dispatcher then hands it to
// stage, where Message.Children reads what they left (FinishWith). See
// pepsi-worker(7), CHILDREN AND JOINS.
//
// Run is the same loop for any reader and writer, for tests and for
// programs that set up their own connection or signals.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// Func is a stage: it does the work for one message in m.Tx and says what
// becomes of the message. A non-nil error rolls the transaction back and
// fails the message. ctx is cancelled when the program is told to stop.
type Func func(ctx context.Context, m *Message) (Move, error)

// Message is the message being processed, read from its queue row.
type Message struct {
	ID   int64 // the message id (ingress order)
	Pass int64 // the pass's token, 0 when the dispatcher sent none (see Options.Protocol)
	// Traceparent is the W3C traceparent of the dispatcher's span of this
	// pass, "" when it sent none (TRACING off, or Options.Protocol below
	// 3). The stage function's ctx carries it as a remote span context,
	// so that spans the stage starts from ctx nest under the pass.
	Traceparent string
	Stage       string          // the stage it is running at
	Attempts    int             // passes at this stage, this one included (1 the first time; a pause counts, an advance starts again at 0)
	CreatedAt   time.Time       // when it entered the queue
	Headers     json.RawMessage // pepsi.message.headers, a JSON object
	Payload     []byte          // pepsi.message.payload
	// Tx is the pass's transaction, in which the message was read (and,
	// without a token, its queue row locked). Do the stage's work in it:
	// it commits together with the move, or not at all. Do not
	// commit or roll it back yourself: a pass whose function did fails,
	// and its move is not made. Nil in OnStatusLine and OneTrip modes.
	Tx pgx.Tx

	fused  []protocol.Fused
	queued []*pgx.QueuedQuery // Queue's statements
	r      *runner            // OnStatusLine: for Load and Fail
	loaded bool               // the fields above are read from the rows
}

// messageSQL reads a running message's queue row and message row, and
// the token of the pass it is running (scan checks it against the one the
// pass was given). Only
// pepsi.state_live holds unfinished messages: through pepsi.state the read
// by id would probe every range of done rows as well. The message comes
// through pepsi.message_row, whose plan is kept: a statement naming the
// partitioned pepsi.message would be planned at each pass. A message it
// does not find is looked up in pepsi.state (explain).
const messageSQL = `
		SELECT s.stage, s.status, s.attempts, s.pass, m.created_at, m.headers, m.payload
		  FROM pepsi.state_live s, pepsi.message_row(s.id) m
		 WHERE s.id = $1`

// explainSQL finds a message that is not in pepsi.state_live.
const explainSQL = `SELECT status, stage FROM pepsi.state WHERE id = $1`

// errNoMessage says that a message's rows were not found.
var errNoMessage = errors.New("does not exist")

// queryer is what read and explain query with: a connection or a Tx.
type queryer interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// read fills m from its rows (lock: a locking clause or "") and checks
// that the message is running.
func (m *Message) read(ctx context.Context, q queryer, lock string) error {
	err := m.scan(q.QueryRow(ctx, messageSQL+lock, m.ID))
	if errors.Is(err, errNoMessage) {
		return m.explain(ctx, q)
	}
	return err
}

// explain says why message m, which messageSQL did not find, is not
// served: it is finished, or it does not exist.
func (m *Message) explain(ctx context.Context, q queryer) error {
	var status, stage string
	err := q.QueryRow(ctx, explainSQL, m.ID).Scan(&status, &stage)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && status == "running": // no message row
		return fmt.Errorf("message %d %w", m.ID, errNoMessage)
	case err != nil:
		return err
	}
	return fmt.Errorf("message %d is not running (it is %s at stage %s)", m.ID, status, stage)
}

// scan fills m from row, messageSQL's, and checks that the message is
// running, and running m.Pass when it is not 0: the stage function is not
// called for a pass the dispatcher has given up.
func (m *Message) scan(row pgx.Row) error {
	var status string
	var pass int64
	err := row.Scan(&m.Stage, &status, &m.Attempts, &pass, &m.CreatedAt, &m.Headers, &m.Payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("message %d %w", m.ID, errNoMessage)
	}
	if err != nil {
		return err
	}
	if status != "running" {
		return fmt.Errorf("message %d is not running (it is %s at stage %s)", m.ID, status, m.Stage)
	}
	if m.Pass != 0 && pass != m.Pass {
		return fmt.Errorf("message %d is not running pass %d: that pass is over (it runs pass %d at stage %s)", m.ID, m.Pass, pass, m.Stage)
	}
	return nil
}

// Load reads the message's stage, attempts, creation time, headers and
// payload in OnStatusLine and OneTrip modes, where only ID and Stage are
// known up front (one query, outside the pass's transaction, no lock); an
// error says the message is not running (with a token: not running this
// pass) or the database failed, and is best returned as the pass's error.
// In the default mode everything is read before the stage function runs
// and Load does nothing.
func (m *Message) Load(ctx context.Context) error {
	if m.loaded {
		return nil
	}
	if m.r == nil {
		return errors.New("worker: Load outside a pass")
	}
	conn, err := m.r.db(ctx)
	if err != nil {
		return err
	}
	if err := m.read(ctx, conn, ""); err != nil {
		return err
	}
	m.loaded = true
	return nil
}

// Header returns the header key: its value if it is a JSON string, its JSON
// text if it is anything else, "" if there is no such header.
func (m *Message) Header(key string) string {
	var h map[string]json.RawMessage
	if json.Unmarshal(m.Headers, &h) != nil {
		return ""
	}
	v, ok := h[key]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// Fused reports that this pass also did the work of stage, which took d:
// the dispatcher books it to that stage's statistics. A name that
// protocol.CheckStage refuses makes the pass fail.
func (m *Message) Fused(stage string, d time.Duration) {
	m.fused = append(m.fused, protocol.Fused{Stage: stage, Seconds: max(d.Seconds(), 0)})
}

// Queue adds a statement to the pass's transaction whose result the stage
// does not need: it runs after the stage function returns, in the order
// queued, and goes out with the move and COMMIT in one round trip, where
// m.Tx.Exec would cost one of its own. An error in it fails the pass,
// rolled back whole. In OneTrip mode it is how the stage does its work; in
// OnStatusLine mode a queued statement makes the pass fail.
func (m *Message) Queue(sql string, args ...any) {
	m.queued = append(m.queued, &pgx.QueuedQuery{SQL: sql, Arguments: args})
}

// Move is what becomes of a message after a successful pass. Build one
// with Advance, Finish, FinishWith, Pause, Fail or Join; the zero Move is an error (the
// function forgot to say).
type Move struct {
	kind   protocol.Move
	stage  string
	delay  time.Duration
	reason string
	// Finish's result (a string, so that a Move stays comparable) and
	// whether there is one.
	result    string
	hasResult bool
}

// Advance moves the message on to stage: pending there once the pass
// commits (on the status line, once the dispatcher settles it). stage must
// differ from the current one (to run a message at the same stage again,
// Pause it).
func Advance(stage string) Move { return Move{kind: protocol.Advance, stage: stage} }

// Finish marks the message done.
func Finish() Move { return Move{kind: protocol.Finish} }

// FinishWith marks the message done and leaves result, at most MaxResult
// bytes, for its parent's join stage to read (Message.Children). A nil
// result is Finish's: none.
func FinishWith(result []byte) Move {
	return Move{kind: protocol.Finish, result: string(result), hasResult: result != nil}
}

// Join parks the message, waiting, until every child it has spawned
// (Message.Spawn, SpawnMany) has ended; the dispatcher then queues it at
// stage (at once when it has none open). With the JOIN_POLICY fail, the
// default, a child that failed fails it instead. stage may be the current
// one.
func Join(stage string) Move { return Move{kind: protocol.Join, stage: stage} }

// Pause parks the message; the dispatcher hands it to this stage again
// once d has passed.
func Pause(d time.Duration) Move { return Move{kind: protocol.Pause, delay: d} }

// Fail marks the message failed (the dead-letter state) with reason in its
// error column. The pass itself succeeded: the answer is 0.
func Fail(reason string) Move { return Move{kind: protocol.Fail, reason: reason} }

// String describes the move, e.g. "advance to deliver".
func (o Move) String() string {
	switch o.kind {
	case protocol.Advance:
		return o.kind.String() + " to " + o.stage
	case protocol.Finish:
		if o.hasResult {
			return fmt.Sprintf("%s with a result of %d bytes", o.kind, len(o.result))
		}
		return o.kind.String()
	case protocol.Join:
		return o.kind.String() + " at " + o.stage
	case protocol.Pause:
		return o.kind.String() + " for " + o.delay.String()
	case protocol.Fail:
		return fmt.Sprintf("%s (%s)", o.kind, o.reason)
	}
	return "no move"
}

// check refuses a move that cannot be carried out for m.
func (o Move) check(m *Message) error {
	switch o.kind {
	case protocol.Advance:
		if protocol.CheckStage(o.stage) != nil {
			return fmt.Errorf("cannot advance to %q: not a stage name", o.stage)
		}
		if o.stage == m.Stage {
			return fmt.Errorf("cannot advance to %s: the message is already there (to run it again, pause it)", o.stage)
		}
	case protocol.Join:
		if protocol.CheckStage(o.stage) != nil {
			return fmt.Errorf("cannot join at %q: not a stage name", o.stage)
		}
	case protocol.Finish:
		if len(o.result) > MaxResult {
			return fmt.Errorf("cannot finish with a result of %d bytes: at most %d (64 KiB)", len(o.result), MaxResult)
		}
	case protocol.Pause:
		if o.delay < 0 {
			return fmt.Errorf("cannot pause for %s: negative delay", o.delay)
		}
	case protocol.Stay:
		return fmt.Errorf("the stage function returned no move (use worker.Advance, Finish, Pause, Fail or Join)")
	}
	return nil
}

// maxPause is the longest pause a status line carries, in seconds.
const maxPause = 1e9

// answer is the status line that carries the move, for the dispatcher
// to apply (OnStatusLine). A Fail, and a Finish with a result (which the
// status line has no room for), are carried out at once with the SQL API
// outside any transaction, and answered with a plain 0.
func (o Move) answer(ctx context.Context, m *Message) (protocol.Status, error) {
	if err := o.check(m); err != nil {
		return protocol.Status{}, err
	}
	switch o.kind {
	case protocol.Advance:
		return protocol.Status{Move: protocol.Advance, Next: o.stage}, nil
	case protocol.Finish:
		if !o.hasResult {
			return protocol.Status{Move: protocol.Finish}, nil
		}
	case protocol.Join:
		return protocol.Status{Move: protocol.Join, Next: o.stage}, nil
	case protocol.Pause:
		if o.delay.Seconds() > maxPause {
			return protocol.Status{}, fmt.Errorf("cannot pause for %s on the status line: longer than %g s", o.delay, float64(maxPause))
		}
		return protocol.Status{Move: protocol.Pause, Delay: o.delay.Seconds()}, nil
	}
	conn, err := m.r.db(ctx)
	if err != nil {
		return protocol.Status{}, err
	}
	sql, args := o.statement(m)
	_, err = conn.Exec(ctx, sql, args...)
	return protocol.Status{}, err
}

// statement is the SQL API call that carries the move out in the pass's
// transaction. pkg/worker is a client of the SQL API like a stage in any
// other language: these are the stage-side calls, not the dispatcher's DAO
// (pkg/queue). A pass given a token presents it (p_pass): the move is
// refused unless the message is running that very pass.
func (o Move) statement(m *Message) (string, []any) {
	if m.Pass != 0 {
		switch o.kind {
		case protocol.Advance:
			return "SELECT pepsi.advance($1, $2, $3)", []any{m.ID, o.stage, m.Pass}
		case protocol.Finish:
			if o.hasResult {
				return "SELECT pepsi.finish($1, $2, $3::bytea)", []any{m.ID, m.Pass, []byte(o.result)}
			}
			return "SELECT pepsi.finish($1, $2)", []any{m.ID, m.Pass}
		case protocol.Join:
			return "SELECT pepsi.join($1, $2, $3)", []any{m.ID, o.stage, m.Pass}
		case protocol.Pause:
			return "SELECT pepsi.pause($1, make_interval(secs => $2), $3)", []any{m.ID, o.delay.Seconds(), m.Pass}
		}
		return "SELECT pepsi.fail($1, $2, $3)", []any{m.ID, o.reason, m.Pass}
	}
	switch o.kind {
	case protocol.Advance:
		return "SELECT pepsi.advance($1, $2)", []any{m.ID, o.stage}
	case protocol.Finish:
		if o.hasResult {
			return "SELECT pepsi.finish($1, NULL, $2::bytea)", []any{m.ID, []byte(o.result)}
		}
		return "SELECT pepsi.finish($1)", []any{m.ID}
	case protocol.Join:
		return "SELECT pepsi.join($1, $2)", []any{m.ID, o.stage}
	case protocol.Pause:
		return "SELECT pepsi.pause($1, make_interval(secs => $2))", []any{m.ID, o.delay.Seconds()}
	}
	return "SELECT pepsi.fail($1, $2)", []any{m.ID, o.reason}
}
