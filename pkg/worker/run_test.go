package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// fixture is a migrated database with messages made running by hand, as
// a claim by the dispatcher would.
type fixture struct {
	t    *testing.T
	db   *pgtest.DB
	dsn  string
	logs *bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	db, dsn := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE side (id bigint)"); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, db: db, dsn: dsn, logs: &bytes.Buffer{}}
}

// running enqueues one message per payload at stage "a" and claims them.
func (f *fixture) running(payloads ...string) []int64 {
	f.t.Helper()
	ctx := context.Background()
	ids := make([]int64, len(payloads))
	for i, p := range payloads {
		id, err := queue.Enqueue(ctx, f.db.Pool, "a", []byte(p), map[string]string{"k": "v"})
		if err != nil {
			f.t.Fatal(err)
		}
		ids[i] = id
	}
	if _, err := f.db.Admit(ctx); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.db.Pool.Exec(ctx, "UPDATE pepsi.state SET status = 'running', attempts = attempts + 1 WHERE id = ANY($1)", ids); err != nil {
		f.t.Fatal(err)
	}
	return ids
}

func (f *fixture) opts(in io.Reader, out io.Writer) worker.Options {
	return worker.Options{DSN: f.dsn, In: in, Out: out, Log: slog.New(slog.NewTextHandler(f.logs, nil))}
}

// statusAt is the status of a message the tests' passes handed out at a:
// pending at b, where pepsi.advance requeued it, running (not moved) at a.
func statusAt(stage string) string {
	if stage == "b" {
		return "pending"
	}
	return "running"
}

func (f *fixture) row(id int64) (status, stage, errText string, timeout *time.Time) {
	f.t.Helper()
	err := f.db.Pool.QueryRow(context.Background(),
		"SELECT status, stage, coalesce(error, ''), timeout FROM pepsi.state WHERE id = $1", id).Scan(&status, &stage, &errText, &timeout)
	if err != nil {
		f.t.Fatal(err)
	}
	return
}

func (f *fixture) sideEffects(id int64) int64 {
	f.t.Helper()
	var n int64
	if err := f.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM side WHERE id = $1", id).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// byPayload is a stage whose payload says what to do; it always records a
// side effect first, to show whether its transaction committed.
func byPayload(ctx context.Context, m *worker.Message) (worker.Move, error) {
	if _, err := m.Tx.Exec(ctx, "INSERT INTO side VALUES ($1)", m.ID); err != nil {
		return worker.Move{}, err
	}
	switch p := string(m.Payload); p {
	case "advance":
		return worker.Advance("b"), nil
	case "finish":
		return worker.Finish(), nil
	case "pause":
		return worker.Pause(90 * time.Second), nil
	case "fail":
		return worker.Fail("no good"), nil
	case "error":
		return worker.Move{}, errors.New("broken\nin two lines")
	case "zero":
		return worker.Move{}, nil
	case "same":
		return worker.Advance(m.Stage), nil
	case "badstage":
		return worker.Advance("no spaces"), nil
	case "panic":
		panic("oops")
	case "fused":
		m.Fused("x", 250*time.Millisecond)
		m.Fused("y", 0)
		return worker.Finish(), nil
	case "badfused":
		m.Fused("x y", time.Second)
		return worker.Finish(), nil
	case "headers":
		if m.Header("k") != "v" || m.Header("missing") != "" || m.Stage != "a" || m.Attempts != 1 || m.CreatedAt.IsZero() {
			return worker.Move{}, errors.New("bad message fields")
		}
		return worker.Finish(), nil
	}
	return worker.Move{}, errors.New("unknown payload")
}

// TestRunMoves feeds every kind of message through Run and checks each
// answer and row: with the exec mode Run chooses on a direct connection
// (pgx's statement cache), and with the one it chooses behind a pooler
// (exec: nothing prepared, text results), named in the DSN here.
func TestRunMoves(t *testing.T) {
	for _, mode := range []string{"", "exec"} {
		t.Run("mode="+mode, func(t *testing.T) { runMoves(t, mode) })
	}
}

// withParam adds key=value to a URL or keyword/value DSN.
func withParam(dsn, key, value string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + key + "=" + value
}

func runMoves(t *testing.T, mode string) {
	f := newFixture(t)
	if mode != "" {
		f.dsn = withParam(f.dsn, "default_query_exec_mode", mode)
	}
	ids := f.running("advance", "finish", "pause", "fail", "error", "zero", "same", "badstage", "panic", "fused", "badfused", "headers")
	var in strings.Builder
	for _, id := range ids {
		in.WriteString(itoa(id) + "\n")
	}
	in.WriteString(itoa(ids[1]) + "\n") // no longer running: finished
	in.WriteString("999999\n")          // no such message
	in.WriteString("12x\n")             // not an id
	var out bytes.Buffer
	if err := worker.Run(context.Background(), byPayload, f.opts(strings.NewReader(in.String()), &out)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"0",
		"0",
		"0",
		"0",
		"1 # broken in two lines",
		"1 # the stage function returned no move (use worker.Advance, Finish, Pause, Fail or Join)",
		"1 # cannot advance to a: the message is already there (to run it again, pause it)",
		`1 # cannot advance to "no spaces": not a stage name`,
		"1 # panic: oops",
		"0 x=0.25 y=0",
		`1 # fused stage "x y" is not a stage name`,
		"0",
		"1 # message " + itoa(ids[1]) + " is not running (it is done at stage a)",
		"1 # message 999999 does not exist",
		`1 # bad message id "12x"`,
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("status lines:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
	type rowWant struct{ status, stage, err string }
	wantRows := []rowWant{
		{"pending", "b", ""}, {"done", "a", ""}, {"paused", "a", ""}, {"failed", "a", "no good"},
		{"running", "a", ""}, {"running", "a", ""}, {"running", "a", ""}, {"running", "a", ""}, {"running", "a", ""},
		{"done", "a", ""}, {"running", "a", ""}, {"done", "a", ""},
	}
	for i, id := range ids {
		status, stage, errText, timeout := f.row(id)
		if w := wantRows[i]; status != w.status || stage != w.stage || errText != w.err {
			t.Errorf("message %d (%s): %s at %s error %q, want %+v", id, []string{"advance", "finish", "pause", "fail", "error", "zero", "same", "badstage", "panic", "fused", "badfused", "headers"}[i], status, stage, errText, w)
		}
		// A failed pass is rolled back whole, its side effect too.
		wantSide := int64(0)
		if w := wantRows[i]; w.status != "running" || w.stage != "a" {
			wantSide = 1
		}
		if n := f.sideEffects(id); n != wantSide {
			t.Errorf("message %d: %d side effects, want %d", id, n, wantSide)
		}
		if status == "paused" && (timeout == nil || time.Until(*timeout) < 60*time.Second) {
			t.Errorf("message %d paused until %v, want about 90 s from now", id, timeout)
		}
	}
	if !strings.Contains(f.logs.String(), "stage function panicked") {
		t.Errorf("panic not logged:\n%s", f.logs)
	}
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// idLines is the input that serves ids in order, one per line.
func idLines(ids []int64) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(itoa(id) + "\n")
	}
	return b.String()
}

// countingWriter counts Write calls.
type countingWriter struct {
	mu     sync.Mutex
	writes int
	buf    bytes.Buffer
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

// TestRunPipelined checks that ids that arrive together are each answered
// in a write of its own as its pass ends, and that an id that arrives
// alone is answered (flushed) before the next one is read.
// TestRunHoldBounded checks that a slow message does not hold back the
// answer before it.
func TestRunPipelined(t *testing.T) {
	f := newFixture(t)
	ids := f.running("finish", "finish", "finish", "finish", "finish")

	out := &countingWriter{}
	in := strings.NewReader(itoa(ids[0]) + "\n" + itoa(ids[1]) + "\n" + itoa(ids[2]) + "\n")
	if err := worker.Run(context.Background(), byPayload, f.opts(in, out)); err != nil {
		t.Fatal(err)
	}
	if out.buf.String() != "0\n0\n0\n" || out.writes != 3 {
		t.Errorf("3 pipelined ids: %q in %d writes, want 3 answers in 3 writes", out.buf.String(), out.writes)
	}

	// One id at a time over a pipe: each answer must come out before the
	// next id is sent, or this deadlocks (and times out).
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- worker.Run(context.Background(), byPayload, f.opts(inR, outW)) }()
	answers := make(chan string, 2)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := outR.Read(buf)
			if err != nil {
				return
			}
			answers <- string(buf[:n])
		}
	}()
	for _, id := range ids[3:] {
		if _, err := inW.Write([]byte(itoa(id) + "\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-answers:
			if a != "0\n" {
				t.Errorf("answer %q", a)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no answer to a lone id: not flushed")
		}
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return at EOF")
	}
}

// TestRunHoldBounded: two ids arrive together; the second message does
// not finish until the first one's answer is out.
func TestRunHoldBounded(t *testing.T) {
	f := newFixture(t)
	ids := f.running("finish", "finish")
	outR, outW := io.Pipe()
	got := make(chan string, 2)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := outR.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- string(buf[:n])
		}
	}()
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		if m.ID == ids[1] {
			select {
			case a := <-got:
				if a != "0\n" {
					return worker.Move{}, errors.New("first answer: " + a)
				}
			case <-time.After(30 * time.Second):
				return worker.Move{}, errors.New("the first answer was held back")
			}
		}
		return worker.Finish(), nil
	}
	in := strings.NewReader(itoa(ids[0]) + "\n" + itoa(ids[1]) + "\n")
	if err := worker.Run(context.Background(), fn, f.opts(in, outW)); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	if a := <-got; a != "0\n" {
		t.Errorf("second answer %q", a)
	}
}

// TestRunCancel stops Run while the stage function is busy: it returns at
// once, the message is rolled back and not answered.
func TestRunCancel(t *testing.T) {
	f := newFixture(t)
	ids := f.running("block")
	started := make(chan struct{})
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		if _, err := m.Tx.Exec(ctx, "INSERT INTO side VALUES ($1)", m.ID); err != nil {
			return worker.Move{}, err
		}
		close(started)
		_, err := m.Tx.Exec(ctx, "SELECT pg_sleep(60)")
		return worker.Finish(), err
	}
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	defer inW.Close()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx, fn, f.opts(inR, &out)) }()
	if _, err := inW.Write([]byte(itoa(ids[0]) + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("stage function not called")
	}
	begun := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if d := time.Since(begun); d > 10*time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	if out.Len() != 0 {
		t.Errorf("answered %q after cancel", out.String())
	}
	f.waitNoBackend(t)
	if status, _, _, _ := f.row(ids[0]); status != "running" || f.sideEffects(ids[0]) != 0 {
		t.Errorf("after cancel: status %s, %d side effects; want running and rolled back", status, f.sideEffects(ids[0]))
	}

	// Cancelled while waiting for an id: returns too.
	ctx, cancel = context.WithCancel(context.Background())
	inR2, inW2 := io.Pipe()
	defer inW2.Close()
	go func() { done <- worker.Run(ctx, fn, f.opts(inR2, &out)) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("idle Run returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("idle Run did not return after cancel")
	}
}

// waitNoBackend waits until no session other than the pool's runs pg_sleep.
func (f *fixture) waitNoBackend(t *testing.T) {
	t.Helper()
	testkit.Wait(t, "the cancelled transaction to end on the server", 30*time.Second, func() bool {
		var n int64
		_ = f.db.Pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()").Scan(&n)
		return n == 0
	})
}

// TestRunTransient re-runs a pass that hit a serialization failure.
func TestRunTransient(t *testing.T) {
	f := newFixture(t)
	ids := f.running("x", "y")
	calls := map[int64]int{}
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		calls[m.ID]++
		if _, err := m.Tx.Exec(ctx, "INSERT INTO side VALUES ($1)", m.ID); err != nil {
			return worker.Move{}, err
		}
		if m.ID == ids[0] && calls[m.ID] == 1 || m.ID == ids[1] {
			return worker.Move{}, &pgconn.PgError{Severity: "ERROR", Code: pgerrcode.SerializationFailure, Message: "could not serialize access"}
		}
		return worker.Finish(), nil
	}
	var out bytes.Buffer
	in := strings.NewReader(itoa(ids[0]) + "\n" + itoa(ids[1]) + "\n")
	if err := worker.Run(context.Background(), fn, f.opts(in, &out)); err != nil {
		t.Fatal(err)
	}
	if want := "0\n1 # ERROR: could not serialize access (SQLSTATE 40001)\n"; out.String() != want {
		t.Errorf("answers %q, want %q", out.String(), want)
	}
	if calls[ids[0]] != 2 || calls[ids[1]] != 3 {
		t.Errorf("calls %v: want 2 for the first, 3 (all passes) for the second", calls)
	}
	if f.sideEffects(ids[0]) != 1 || f.sideEffects(ids[1]) != 0 {
		t.Errorf("side effects %d %d, want 1 0", f.sideEffects(ids[0]), f.sideEffects(ids[1]))
	}
}

// TestRunConnectionLost answers the message in hand NotRun (75: not its
// fault, the dispatcher puts it back) and returns an error when the server
// ends the worker's session.
func TestRunConnectionLost(t *testing.T) {
	f := newFixture(t)
	ids := f.running("a", "b")
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		if _, err := f.db.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'lost-test'"); err != nil {
			return worker.Move{}, err
		}
		_, err := m.Tx.Exec(ctx, "SELECT 1")
		return worker.Finish(), err
	}
	conn, err := pgx.Connect(context.Background(), f.dsn+"&application_name=lost-test")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	opts := f.opts(strings.NewReader(itoa(ids[0])+"\n"+itoa(ids[1])+"\n"), &out)
	opts.Conn, opts.DSN = conn, ""
	err = worker.Run(context.Background(), fn, opts)
	if err == nil || !strings.Contains(err.Error(), "database connection lost") {
		t.Errorf("Run returned %v, want a lost connection", err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "75 # database connection lost: ") {
		t.Errorf("answers %q, want one NotRun (75)", out.String())
	}
}

// TestRunBadOptions covers the errors Run reports before serving.
func TestRunBadOptions(t *testing.T) {
	noop := func(context.Context, *worker.Message) (worker.Move, error) { return worker.Finish(), nil }
	in, out := strings.NewReader(""), io.Discard
	for _, tc := range []struct {
		name string
		fn   worker.Func
		opts worker.Options
		want string
	}{
		{"nil func", nil, worker.Options{In: in, Out: out}, "no stage function"},
		{"no in", noop, worker.Options{Out: out}, "Options.In and Options.Out are required"},
		{"bad dsn", noop, worker.Options{DSN: "postgres://%zz", In: in, Out: out}, "bad DSN"},
		{"no server", noop, worker.Options{DSN: "postgres:///x?host=/nonexistent&connect_timeout=2", In: in, Out: out}, "connect to database"},
	} {
		err := worker.Run(context.Background(), tc.fn, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestMoveString documents the moves' descriptions.
func TestMoveString(t *testing.T) {
	for o, want := range map[worker.Move]string{
		worker.Advance("b"):            "advance to b",
		worker.Finish():                "finish",
		worker.Pause(2 * time.Second):  "pause for 2s",
		worker.Fail("x"):               "fail (x)",
		worker.Join("j"):               "join at j",
		worker.FinishWith([]byte("r")): "finish with a result of 1 bytes",
		worker.FinishWith(nil):         "finish",
		{}:                             "no move",
	} {
		if o.String() != want {
			t.Errorf("%q, want %q", o.String(), want)
		}
	}
}

// TestRunStageEndsTx: a stage function that commits m.Tx itself has taken
// the pass's transaction from under the outcome: the pass fails, and the
// message stays running (the outcome is not applied outside a transaction).
func TestRunStageEndsTx(t *testing.T) {
	f := newFixture(t)
	ids := f.running("x")
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		if err := m.Tx.Commit(ctx); err != nil {
			return worker.Move{}, err
		}
		return worker.Finish(), nil
	}
	var out bytes.Buffer
	if err := worker.Run(context.Background(), fn, f.opts(strings.NewReader(itoa(ids[0])+"\n"), &out)); err != nil {
		t.Fatal(err)
	}
	if want := "1 # the stage function ended the pass's transaction (m.Tx is committed with the move)\n"; out.String() != want {
		t.Errorf("status line %q, want %q", out.String(), want)
	}
	if status, stage, _, _ := f.row(ids[0]); status != "running" || stage != "a" {
		t.Errorf("message %s at %s, want still running at a", status, stage)
	}
}

// TestConnectMode checks the query exec mode of the connection Run makes:
// pgx's statement cache on PostgreSQL's own session, the DSN's mode when
// it names one. (Behind PgBouncer it is exec: contrib's TestPgBouncer.)
func TestConnectMode(t *testing.T) {
	dsn := pgtest.Empty(t)
	for _, tc := range []struct {
		dsn  string
		want pgx.QueryExecMode
	}{
		{dsn, pgx.QueryExecModeCacheStatement},
		{withParam(dsn, "default_query_exec_mode", "simple_protocol"), pgx.QueryExecModeSimpleProtocol},
		{withParam(dsn, "default_query_exec_mode", "cache_statement"), pgx.QueryExecModeCacheStatement},
	} {
		conn, pooled, err := worker.Connect(context.Background(), tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := conn.Config().DefaultQueryExecMode; got != tc.want || pooled {
			t.Errorf("%s: mode %v, behind a pooler %v; want %v, false", tc.dsn, got, pooled, tc.want)
		}
		conn.Close(context.Background())
	}
}

// roundTrips counts what a connection sends: batches and lone statements.
type roundTrips struct {
	mu               sync.Mutex
	batches, queries int
	afterBatch       func(n int) // called at the end of the nth batch
}

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries++
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	c.mu.Lock()
	n, fn := c.batches, c.afterBatch
	c.mu.Unlock()
	if fn != nil {
		fn(n)
	}
}

// traced connects with a tracer that counts what the connection sends.
func (f *fixture) traced() (*pgx.Conn, *roundTrips) {
	f.t.Helper()
	cfg, err := pgx.ParseConfig(f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	trips := &roundTrips{}
	cfg.Tracer = trips
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, trips
}

// TestRunChainsReads: ids that arrive together cost one batch each, the
// next message's BEGIN and read going out with the last one's COMMIT;
// a message the chained read finds not running, and a pass that fails
// after its message was read that way, are answered as alone.
func TestRunChainsReads(t *testing.T) {
	f := newFixture(t)
	ids := f.running("advance", "advance", "advance", "advance", "advance", "advance", "error", "advance", "advance", "advance")
	in := idLines(ids)
	conn, trips := f.traced()
	opts := f.opts(strings.NewReader(in), &bytes.Buffer{})
	opts.Conn = conn
	var out bytes.Buffer
	opts.Out = &out
	if err := worker.Run(context.Background(), byPayload, opts); err != nil {
		t.Fatal(err)
	}
	if want := "0\n0\n0\n0\n0\n0\n1 # broken in two lines\n0\n0\n0\n"; out.String() != want {
		t.Errorf("status lines %q, want %q", out.String(), want)
	}
	for i, id := range ids {
		status, stage, _, _ := f.row(id)
		wantStage := "b"
		if i == 6 {
			wantStage = "a"
		}
		if status != statusAt(wantStage) || stage != wantStage {
			t.Errorf("message %d: %s at %s, want %s at %s", id, status, stage, statusAt(wantStage), wantStage)
		}
	}
	// Ten messages, nine of them moved: the first read, nine COMMITs
	// (each with the next read) and the read after the failed pass's
	// rollback; lone statements: the stage's ten INSERTs and one ROLLBACK.
	if trips.batches != 11 || trips.queries != 11 {
		t.Errorf("%d batches and %d lone statements, want 11 and 11", trips.batches, trips.queries)
	}
	if conn.PgConn().TxStatus() != 'I' {
		t.Errorf("Run left a transaction open on the caller's connection (status %c)", conn.PgConn().TxStatus())
	}
}

// TestRunQueue: statements queued with Message.Queue run after the stage
// function, in order, in the pass's transaction and in the move's round
// trip; one that fails fails the pass, rolled back whole; in
// OnStatusLine mode a queued statement fails the pass.
func TestRunQueue(t *testing.T) {
	f := newFixture(t)
	ids := f.running("ok", "ok", "bad", "ok")
	queued := func(_ context.Context, m *worker.Message) (worker.Move, error) {
		m.Queue("INSERT INTO side VALUES ($1)", m.ID)
		if string(m.Payload) == "bad" {
			m.Queue("INSERT INTO side VALUES ($1, 'no such column')", m.ID)
		}
		m.Queue("UPDATE side SET id = -id WHERE id = $1", m.ID) // after the INSERT
		return worker.Advance("b"), nil
	}
	in := idLines(ids)
	conn, trips := f.traced()
	var out bytes.Buffer
	opts := f.opts(strings.NewReader(in), &out)
	opts.Conn = conn
	if err := worker.Run(context.Background(), queued, opts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 || lines[0] != "0" || lines[1] != "0" || !strings.HasPrefix(lines[2], "1 # ") || lines[3] != "0" {
		t.Errorf("status lines %q, want 0, 0, an error, 0", out.String())
	}
	for i, id := range ids {
		status, stage, _, _ := f.row(id)
		wantStage, wantSide := "b", int64(1)
		if i == 2 {
			wantStage, wantSide = "a", 0
		}
		if status != statusAt(wantStage) || stage != wantStage {
			t.Errorf("message %d: %s at %s, want %s at %s", id, status, stage, statusAt(wantStage), wantStage)
		}
		if n := f.sideEffects(-id); n != wantSide {
			t.Errorf("message %d: %d side effects (negated by the second queued statement), want %d", id, n, wantSide)
		}
	}
	// The first read, one batch per pass, and the read of the message
	// after the failed pass again (the server skipped it): six.
	if trips.batches != 6 || trips.queries != 1 {
		t.Errorf("%d batches and %d lone statements, want 6 and 1 (the ROLLBACK)", trips.batches, trips.queries)
	}

	ids = f.running("ok")
	out.Reset()
	opts = f.opts(strings.NewReader(itoa(ids[0])+"\n"), &out)
	opts.Mode = worker.OnStatusLine
	if err := worker.Run(context.Background(), queued, opts); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "1 # statements queued with Message.Queue need the pass's transaction") {
		t.Errorf("OnStatusLine with a queued statement answered %q", out.String())
	}
}

// TestRunCancelChained: Run cancelled after a COMMIT that also began the
// next message's transaction rolls that transaction back, on a
// connection that is the caller's and stays open.
func TestRunCancelChained(t *testing.T) {
	f := newFixture(t)
	ids := f.running("advance", "advance", "advance")
	conn, trips := f.traced()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Batch 1 reads message 1; batch 2 commits it and reads message 2.
	trips.afterBatch = func(n int) {
		if n == 2 {
			cancel()
		}
	}
	var out bytes.Buffer
	opts := f.opts(strings.NewReader(itoa(ids[0])+"\n"+itoa(ids[1])+"\n"+itoa(ids[2])+"\n"), &out)
	opts.Conn = conn
	if err := worker.Run(ctx, byPayload, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if out.String() != "0\n" {
		t.Errorf("answered %q, want message 1's 0 alone", out.String())
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("Run left a transaction open on the caller's connection (status %c)", st)
	}
	// Message 2 is not locked: another session takes its row at once.
	var stage string
	err := f.db.Pool.QueryRow(context.Background(),
		"SELECT stage FROM pepsi.state_live WHERE id = $1 FOR UPDATE NOWAIT", ids[1]).Scan(&stage)
	if err != nil || stage != "a" {
		t.Errorf("message 2 after the cancel: stage %q, %v; want at a and unlocked", stage, err)
	}
	for i, want := range []string{"b", "a", "a"} {
		if status, stage, _, _ := f.row(ids[i]); status != statusAt(want) || stage != want {
			t.Errorf("message %d: %s at %s, want %s at %s", i+1, status, stage, statusAt(want), want)
		}
	}
}
