package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// Options configures Run.
type Options struct {
	// Conn is the connection to use; Run does not close it. When nil, Run
	// connects to DSN and closes the connection when it returns. Run
	// chooses the query exec mode only for a connection it makes (see the
	// package documentation); Conn's is the caller's.
	Conn *pgx.Conn
	DSN  string
	// AppName is the application_name of a connection Run makes, unless
	// DSN sets one; default "pepsi-worker".
	AppName string
	In      io.Reader    // id lines: "ID", or "ID TOKEN" with the pass token
	Out     io.Writer    // status lines, one per id
	Log     *slog.Logger // errors, one line each; slog.Default() when nil
	// TxOptions are the options of every message's transaction (isolation
	// level and so on); the zero value is the server's default.
	TxOptions pgx.TxOptions
	// Mode says how moves reach the queue: InTransaction (the default),
	// OnStatusLine or OneTrip.
	Mode Mode
	// Stage is the stage this program serves (Main takes $PEPSI_STAGE).
	// In OnStatusLine and OneTrip modes it is Message.Stage before Load,
	// and an Advance to it is refused; "" leaves both unknown.
	Stage string
	// Protocol is the worker protocol version the dispatcher speaks
	// (Main takes $PEPSI_PROTOCOL, protocol.EnvProtocol). From 2 on, Run
	// first writes the hello line that asks for pass tokens
	// (protocol.HelloToken), and each pass given one presents it on its
	// move (Message.Pass); from 3 on it asks for trace contexts too
	// (protocol.HelloTrace), and the stage function's ctx carries the
	// pass span's (Message.Traceparent); 0 or 1: no hello, bare ids.
	Protocol int
}

// Mode says how a stage's move reaches the queue.
type Mode uint8

const (
	// InTransaction serves each message in a transaction that reads it
	// (locking its queue row when the id came without a pass token); the
	// move is made with the SQL API in that transaction, which commits
	// before the answer "0" goes out.
	InTransaction Mode = iota
	// OnStatusLine serves each message outside any transaction, with no
	// row lock and Message.Tx nil, and answers the move on the status
	// line ("0 next:STAGE", "0 done", "0 pause:SECONDS", "0 join:STAGE")
	// for the dispatcher to apply in its batched statements: a message
	// costs the stage no commit. It is for stages whose work happens
	// outside the database. Only the message's id and stage are known up
	// front; Message.Load reads the rest. Fail still marks the message
	// failed itself (pepsi.fail, one statement): failures are rare and
	// keep their meaning; so does FinishWith (pepsi.finish with the
	// result). Message.Spawn is refused: there is no transaction to make
	// the children in. The connection is made when first needed.
	OnStatusLine
	// OneTrip serves each message in one round trip: the function runs
	// before anything is sent, knowing only the message's id and stage
	// (Message.Load reads the rest, in a query of its own), with
	// Message.Tx nil; it does its work with Message.Queue. BEGIN, the
	// queued statements, the move and COMMIT then go out together. No
	// read locks the queue row first: the move's UPDATE locks it, and
	// fails the pass, rolled back whole, if the message is no longer
	// running (that pass, given its token). It is for stages whose work
	// is statements that need no answer.
	OneTrip
)

// maxPasses is how often a message is tried when its pass fails with a
// serialization failure or deadlock.
const maxPasses = 3

// errConnLost ends Run after the answer for the message in hand.
var errConnLost = errors.New("database connection lost")

// Run serves message ids from opts.In with fn until opts.In ends (then it
// returns nil) or ctx is cancelled (then it returns ctx.Err() at once: the
// message in hand is rolled back and not answered). Status lines go to
// opts.Out, each written as soon as its pass has ended.
// A lost database connection or a failed write to opts.Out ends Run with
// an error. Run reads opts.In in a goroutine of its own, which is still
// blocked in Read after a cancellation until opts.In is closed or ends.
func Run(ctx context.Context, fn Func, opts Options) error {
	if fn == nil {
		return errors.New("worker: no stage function")
	}
	if opts.In == nil || opts.Out == nil {
		return errors.New("worker: Options.In and Options.Out are required")
	}
	r := &runner{fn: fn, conn: opts.Conn, log: opts.Log, txo: opts.TxOptions, mode: opts.Mode, stage: opts.Stage}
	if r.log == nil {
		r.log = slog.Default()
	}
	if opts.Protocol >= 2 {
		// First, before connecting: ids the dispatcher writes before it
		// reads the hello come without their tokens.
		hello := protocol.HelloToken
		if opts.Protocol >= 3 {
			hello = protocol.HelloTrace
		}
		if _, err := io.WriteString(opts.Out, hello+"\n"); err != nil {
			return fmt.Errorf("writing the hello line: %w", err)
		}
	}
	if r.conn == nil {
		cfg, auto, err := connConfig(opts.DSN, opts.AppName)
		if err != nil {
			return err
		}
		r.connCfg, r.autoMode = cfg, auto
		if r.mode != OnStatusLine {
			if _, err := r.db(ctx); err != nil {
				return err
			}
		}
		defer func() {
			if r.conn != nil {
				r.conn.Close(context.Background())
			}
		}()
	}

	stop := make(chan struct{})
	defer close(stop)
	lines := make(chan input)
	go readIDs(opts.In, lines, stop)

	defer r.dropNext()
	var buf []byte
	// early is the next input, taken from lines while the last message
	// was being committed, so that its read went out with that COMMIT.
	var early *input
	// buffered: the input being served said that the next line was read
	// already, so peek waits the moment readIDs takes to hand it over
	// rather than miss it.
	var buffered bool
	peek := func() (idLine, bool) {
		if early != nil {
			return idLine{}, false
		}
		var x input
		if buffered {
			select {
			case x = <-lines:
			case <-ctx.Done():
				return idLine{}, false
			}
		} else {
			select {
			case x = <-lines:
			default:
				return idLine{}, false
			}
		}
		early = &x
		if x.err != nil {
			return idLine{}, false
		}
		l, err := parseID(x.line)
		return l, err == nil
	}
	for {
		var in input
		if err := ctx.Err(); err != nil {
			return err
		}
		if early != nil {
			in, early = *early, nil
		} else {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case in = <-lines:
			}
		}
		if in.err != nil {
			if errors.Is(in.err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading message ids: %w", in.err)
		}
		buffered = in.more
		st, err := r.serve(ctx, in.line, peek)
		if ctx.Err() != nil && err != nil {
			return ctx.Err()
		}
		// Each answer is written as its pass ends, even with more ids
		// waiting: it frees the worker's slot for the dispatcher's next
		// claim, which an answer held back to share a write would delay.
		buf = protocol.Append(buf[:0], st)
		if _, werr := opts.Out.Write(buf); werr != nil {
			return fmt.Errorf("writing status lines: %w", werr)
		}
		if err != nil {
			return err
		}
	}
}

// connConfig parses the DSN of a worker's one connection. auto says that
// the DSN leaves the query exec mode to pgx's default, so that connect may
// choose it (see connect).
func connConfig(dsn, app string) (cfg *pgx.ConnConfig, auto bool, err error) {
	cfg, err = pgx.ParseConfig(dsn)
	if err != nil {
		return nil, false, fmt.Errorf("bad DSN: %w", err)
	}
	if app == "" {
		app = "pepsi-worker"
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = app
	}
	// pgx.ParseConfig takes default_query_exec_mode out of the runtime
	// parameters; pgconn's parse leaves it in, so it tells whether the
	// DSN named one.
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, false, fmt.Errorf("bad DSN: %w", err)
	}
	_, named := pc.RuntimeParams["default_query_exec_mode"]
	return cfg, !named, nil
}

// connect makes a worker's one connection. With auto (the DSN names no
// default_query_exec_mode) it chooses how statements are sent:
//
//   - Connected to PostgreSQL itself, pgx's default, QueryExecModeCacheStatement:
//     each statement is prepared once on the session and then runs in one
//     round trip without being parsed and planned again.
//   - Behind a connection pooler, QueryExecModeExec: every statement is
//     sent with the unnamed statement, parsed and run in the same round
//     trip, so nothing outlives the transaction. A pooler in transaction
//     mode hands each transaction whichever server connection is free,
//     where a statement prepared on another does not exist (and PgBouncer
//     before 1.21, Debian 12's 1.18 among them, does not carry prepared
//     statements across in that mode).
//
// The session is PostgreSQL's own when the pid in the key data it sent at
// start-up (BackendKeyData) is the pid pg_backend_pid() reports: a pooler
// sends a key of its own, as it must to route a cancel request when the
// client has no server process of its own. The test is one simple-protocol
// query in the start-up (AfterConnect); behind a pooler the connection is
// then made again in exec mode, which costs a login to the pooler, not a
// server process.
func connect(ctx context.Context, cfg *pgx.ConnConfig, auto bool) (*pgx.Conn, error) {
	if !auto {
		return pgx.ConnectConfig(ctx, cfg)
	}
	probe := cfg.Copy()
	pooled := false
	after := probe.AfterConnect
	probe.AfterConnect = func(ctx context.Context, pc *pgconn.PgConn) error {
		if after != nil {
			if err := after(ctx, pc); err != nil {
				return err
			}
		}
		p, err := behindPooler(ctx, pc)
		pooled = p
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, probe)
	if err != nil || !pooled {
		return conn, err
	}
	conn.Close(ctx)
	exec := cfg.Copy()
	exec.DefaultQueryExecMode = pgx.QueryExecModeExec
	return pgx.ConnectConfig(ctx, exec)
}

// behindPooler reports whether pc is not PostgreSQL's own session: the
// server process that runs its statements is not the one whose key it got.
func behindPooler(ctx context.Context, pc *pgconn.PgConn) (bool, error) {
	rs, err := pc.Exec(ctx, "SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		return false, err
	}
	if len(rs) != 1 || len(rs[0].Rows) != 1 || len(rs[0].Rows[0]) != 1 {
		return false, errors.New("SELECT pg_backend_pid() returned no row")
	}
	pid, err := strconv.ParseUint(string(rs[0].Rows[0][0]), 10, 32)
	if err != nil {
		return false, fmt.Errorf("SELECT pg_backend_pid(): %w", err)
	}
	return uint32(pid) != pc.PID(), nil
}

// db returns the worker's one connection, making it on first use. A
// failure to connect is kept: the worker has lost its database.
func (r *runner) db(ctx context.Context) (*pgx.Conn, error) {
	if r.conn != nil {
		return r.conn, nil
	}
	if r.connErr != nil {
		return nil, r.connErr
	}
	conn, err := connect(ctx, r.connCfg, r.autoMode)
	if err != nil {
		if ctx.Err() == nil {
			r.connErr = fmt.Errorf("connect to database: %w", err)
		}
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	r.conn = conn
	return conn, nil
}

// lost reports whether the worker's connection is gone for good.
func (r *runner) lost() bool {
	return r.connErr != nil || r.conn != nil && r.conn.IsClosed()
}

// runner holds what serving a message needs.
type runner struct {
	fn       Func
	conn     *pgx.Conn // nil until made (OnStatusLine connects when first needed)
	connCfg  *pgx.ConnConfig
	autoMode bool  // connect chooses the query exec mode (the DSN names none)
	connErr  error // connecting failed: the database is lost
	log      *slog.Logger
	txo      pgx.TxOptions
	mode     Mode
	stage    string
	next     *Message // read and locked in a transaction still open, with the last COMMIT
}

// serve answers one input line. A non-nil error ends Run: after the answer
// if the connection was lost, without one if ctx was cancelled.
func (r *runner) serve(ctx context.Context, line []byte, peek func() (idLine, bool)) (protocol.Status, error) {
	l, err := parseID(line)
	if err != nil {
		r.log.Error("bad message id on stdin", "line", string(line))
		return protocol.Status{Code: 1, Text: "bad message id " + protocol.Quote(line)}, nil
	}
	for pass := 1; ; pass++ {
		var st protocol.Status
		var err error
		switch r.mode {
		case OnStatusLine:
			st, err = r.answerPass(ctx, l)
		case OneTrip:
			st.Fused, err = r.oneTripPass(ctx, l)
		default:
			st.Fused, err = r.pass(ctx, l, peek)
		}
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil {
			return protocol.Status{}, ctx.Err()
		}
		if pgerr.IsTransient(err) && pass < maxPasses && !r.lost() {
			r.log.Warn("transient error; running the message again", "id", l.id, "pass", pass, "err", err)
			continue
		}
		if r.lost() {
			// Not the message's fault: protocol.NotRun puts it back
			// without counting the pass.
			r.log.Error("message not run: database connection lost", "id", l.id, "err", err)
			st = protocol.Status{Code: protocol.NotRun, Text: "database connection lost: " + err.Error()}
			return st, fmt.Errorf("%w: %v", errConnLost, err)
		}
		r.log.Error("message failed", "id", l.id, "err", err)
		return protocol.Status{Code: 1, Text: err.Error()}, nil
	}
}

// answerPass runs fn for the message of l outside any transaction and
// returns the status line that carries its move (OnStatusLine).
func (r *runner) answerPass(ctx context.Context, l idLine) (protocol.Status, error) {
	m := l.message()
	m.Stage, m.r = r.stage, r
	out, err := r.call(ctx, m)
	if err != nil {
		return protocol.Status{}, err
	}
	if len(m.queued) > 0 {
		return protocol.Status{}, errors.New("statements queued with Message.Queue need the pass's transaction (the default mode, not OnStatusLine)")
	}
	if err := checkFused(m.fused); err != nil {
		return protocol.Status{}, err
	}
	st, err := out.answer(ctx, m)
	if err != nil {
		return protocol.Status{}, err
	}
	if err := ctx.Err(); err != nil {
		return protocol.Status{}, err // told to stop: the dispatcher puts it back
	}
	st.Fused = m.fused
	return st, nil
}

func checkFused(fused []protocol.Fused) error {
	for _, f := range fused {
		if protocol.CheckStage(f.Stage) != nil {
			return fmt.Errorf("fused stage %q is not a stage name", f.Stage)
		}
	}
	return nil
}

// call runs the stage function, turning a panic into an error.
func (r *runner) call(ctx context.Context, m *Message) (out Move, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("stage function panicked", "id", m.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.fn(withPassSpan(ctx, m), m)
}
