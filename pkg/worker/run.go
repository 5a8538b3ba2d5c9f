package worker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// Options configures Run.
type Options struct {
	// Conn is the connection to use; Run does not close it. When nil, Run
	// connects to DSN and closes the connection when it returns.
	Conn *pgx.Conn
	DSN  string
	// AppName is the application_name of a connection Run makes, unless
	// DSN sets one; default "pepsi-worker".
	AppName string
	In      io.Reader    // message ids, one per line
	Out     io.Writer    // status lines, one per id
	Log     *slog.Logger // errors, one line each; slog.Default() when nil
	// TxOptions are the options of every message's transaction (isolation
	// level and so on); the zero value is the server's default.
	TxOptions pgx.TxOptions
}

// maxIDLine bounds an input line; an id has at most 20 characters.
const maxIDLine = 4096

// maxPasses is how often a message is tried when its pass fails with a
// serialization failure or deadlock.
const maxPasses = 3

// errConnLost ends Run after the answer for the message in hand.
var errConnLost = errors.New("database connection lost")

// Run serves message ids from opts.In with fn until opts.In ends (then it
// returns nil) or ctx is cancelled (then it returns ctx.Err() at once: the
// message in hand is rolled back and not answered). Status lines go to
// opts.Out, flushed whenever no further id is already waiting in opts.In
// (answers to pipelined ids are held at most a couple of milliseconds, to
// go out in one write).
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
	r := &runner{fn: fn, conn: opts.Conn, log: opts.Log, txo: opts.TxOptions}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.conn == nil {
		conn, err := connect(ctx, opts.DSN, opts.AppName)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		r.conn = conn
	}

	stop := make(chan struct{})
	defer close(stop)
	lines := make(chan input)
	go readIDs(opts.In, lines, stop)

	out := &answers{w: bufio.NewWriterSize(opts.Out, 64<<10)}
	defer out.stop()
	var buf []byte
	for {
		var in input
		select {
		case <-ctx.Done():
			_ = out.flush()
			return ctx.Err()
		case in = <-lines:
		}
		if in.err != nil {
			if err := out.flush(); err != nil {
				return err
			}
			if errors.Is(in.err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading message ids: %w", in.err)
		}
		st, err := r.serve(ctx, in.line)
		if ctx.Err() != nil && err != nil {
			_ = out.flush() // what was committed before is answered
			return ctx.Err()
		}
		buf = protocol.Append(buf[:0], st)
		if werr := out.write(buf, in.more && err == nil); werr != nil {
			return werr
		}
		if err != nil {
			return err
		}
	}
}

// maxHold is how long an answer may wait in the buffer for the answers to
// the ids pipelined behind it, so that they go out in one write. It is
// short: a slow next message must not hold an answer back (the dispatcher
// times the head of the pipeline against MAX_RUNTIME).
var maxHold = 2 * time.Millisecond

// answers is the status-line writer: answers are flushed at once when no
// further id is waiting, else after at most maxHold.
type answers struct {
	mu    sync.Mutex
	w     *bufio.Writer
	timer *time.Timer // pending flush of held answers
	err   error       // the first write error; sticky
}

// write adds one status line; hold says another id is already waiting.
func (a *answers) write(line []byte, hold bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if _, err := a.w.Write(line); err != nil {
		a.err = fmt.Errorf("writing status lines: %w", err)
		return a.err
	}
	if !hold {
		return a.flushLocked()
	}
	if a.timer == nil {
		var t *time.Timer
		t = time.AfterFunc(maxHold, func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.timer == t {
				_ = a.flushLocked()
			}
		})
		a.timer = t
	}
	return nil
}

func (a *answers) flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

func (a *answers) flushLocked() error {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if a.err == nil {
		if err := a.w.Flush(); err != nil {
			a.err = fmt.Errorf("writing status lines: %w", err)
		}
	}
	return a.err
}

// stop cancels a pending flush.
func (a *answers) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// connect opens the one connection of a worker.
func connect(ctx context.Context, dsn, app string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad DSN: %w", err)
	}
	if app == "" {
		app = "pepsi-worker"
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = app
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return conn, nil
}

// input is one line of ids, and whether a whole next line is already
// buffered (so that the answer need not be flushed yet).
type input struct {
	line []byte
	more bool
	err  error // io.EOF at the end
}

// readIDs sends in's lines on lines until it ends or stop is closed.
func readIDs(in io.Reader, lines chan<- input, stop <-chan struct{}) {
	br := bufio.NewReaderSize(in, maxIDLine)
	send := func(x input) bool {
		select {
		case lines <- x:
			return true
		case <-stop:
			return false
		}
	}
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			line, err = []byte("line too long"), nil
		case err != nil && len(line) > 0:
			err = nil // a last line without a newline is still an id
		}
		if err != nil {
			send(input{err: err})
			return
		}
		line = bytes.Clone(bytes.TrimRight(line, "\r\n"))
		more := bytes.IndexByte(peekBuffered(br), '\n') >= 0
		if !send(input{line: line, more: more}) {
			return
		}
	}
}

func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// runner holds what serving a message needs.
type runner struct {
	fn   Func
	conn *pgx.Conn
	log  *slog.Logger
	txo  pgx.TxOptions
}

// serve answers one input line. A non-nil error ends Run: after the answer
// if the connection was lost, without one if ctx was cancelled.
func (r *runner) serve(ctx context.Context, line []byte) (protocol.Status, error) {
	id, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 10, 64)
	if err != nil {
		r.log.Error("bad message id on stdin", "line", string(line))
		return protocol.Status{Code: 1, Text: "bad message id " + protocol.Quote(line)}, nil
	}
	for pass := 1; ; pass++ {
		fused, err := r.pass(ctx, id)
		if err == nil {
			return protocol.Status{Fused: fused}, nil
		}
		if ctx.Err() != nil {
			return protocol.Status{}, ctx.Err()
		}
		if isTransient(err) && pass < maxPasses && !r.conn.IsClosed() {
			r.log.Warn("transient error; running the message again", "id", id, "pass", pass, "err", err)
			continue
		}
		r.log.Error("message failed", "id", id, "err", err)
		st := protocol.Status{Code: 1, Text: err.Error()}
		if r.conn.IsClosed() {
			return st, fmt.Errorf("%w: %v", errConnLost, err)
		}
		return st, nil
	}
}

// pass runs fn for message id in a transaction and commits its outcome.
func (r *runner) pass(ctx context.Context, id int64) ([]protocol.Fused, error) {
	tx, err := r.conn.BeginTx(ctx, r.txo)
	if err != nil {
		return nil, err
	}
	defer func() {
		// A no-op after Commit; after a cancellation the connection may
		// be gone, so it gets a context of its own.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	m := &Message{ID: id, Tx: tx}
	var status string
	err = tx.QueryRow(ctx, `
		SELECT s.stage, s.status, s.attempts, m.created_at, m.headers, m.payload
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id
		 WHERE s.id = $1
		   FOR UPDATE OF s`, id).Scan(&m.Stage, &status, &m.Attempts, &m.CreatedAt, &m.Headers, &m.Payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("message %d does not exist", id)
	}
	if err != nil {
		return nil, err
	}
	if status != "running" {
		return nil, fmt.Errorf("message %d is not running (it is %s at stage %s)", id, status, m.Stage)
	}
	out, err := r.call(ctx, m)
	if err != nil {
		return nil, err
	}
	for _, f := range m.fused {
		if !protocol.ValidStage([]byte(f.Stage)) {
			return nil, fmt.Errorf("fused stage %q is not a stage name", f.Stage)
		}
	}
	if err := out.apply(ctx, m); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // told to stop: roll back rather than commit now
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return m.fused, nil
}

// call runs the stage function, turning a panic into an error.
func (r *runner) call(ctx context.Context, m *Message) (out Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("stage function panicked", "id", m.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.fn(ctx, m)
}

// isTransient reports a serialization failure or deadlock, worth a retry.
func isTransient(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}
