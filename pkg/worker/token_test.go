package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// claimed enqueues one message per payload at stage "a" and claims them
// as the dispatcher does, and returns their ids and their passes' tokens,
// in the payloads' order.
func (f *fixture) claimed(payloads ...string) (ids, passes []int64) {
	f.t.Helper()
	bs := make([][]byte, len(payloads))
	for i, p := range payloads {
		bs[i] = []byte(p)
	}
	for _, c := range f.db.Claimed(f.t, "a", bs...) {
		ids, passes = append(ids, c.ID), append(passes, c.Pass)
	}
	return ids, passes
}

// claim claims message id, pending at "a", as the dispatcher does, and
// returns its pass's token.
func (f *fixture) claim(id int64) int64 {
	f.t.Helper()
	c, err := queue.Claim(context.Background(), f.db.Pool, []queue.StageCap{{Stage: "a", Cap: 1}}, nil)
	if err != nil || len(c) != 1 || c[0].ID != id || c[0].Pass == 0 {
		f.t.Fatalf("claim of message %d: %+v, %v", id, c, err)
	}
	return c[0].Pass
}

// giveUp settles pass of message id as the dispatcher settles a timeout
// with retries left (paused), makes it pending again as the resume of a
// due retry does, and claims it again: the new pass's token. The settle
// must not wait for the old pass: ctx bounds it.
func (f *fixture) giveUp(ctx context.Context, id, pass int64) int64 {
	f.t.Helper()
	var res queue.TurnResult
	err := f.db.RunTurn(ctx, queue.Turn{Settles: []queue.Settle{{
		ID: id, Stage: "a", Pass: pass, Verdict: queue.PassFailed, Kind: queue.FailTimeout,
		Reason: "timeout: no answer within MAX_RUNTIME", Retry: queue.RetryPolicy{Retries: 5},
	}}}, &res)
	if err != nil {
		f.t.Fatalf("settle of the timed-out pass %d of message %d: %v", pass, id, err)
	}
	if len(res.Settled) != 1 || res.Settled[0].Outcome != queue.OutPaused {
		f.t.Fatalf("the timed-out pass settled %+v, want paused for a retry", res.Settled)
	}
	if err := f.db.RunTurn(ctx, queue.Turn{Resume: true}, &res); err != nil || res.Resumed != 1 {
		f.t.Fatalf("resume of message %d: %d resumed, %v", id, res.Resumed, err)
	}
	return f.claim(id)
}

// queueRow is the queue row of message id: its status, stage and pass.
func (f *fixture) queueRow(id int64) (status, stage string, pass int64) {
	f.t.Helper()
	err := f.db.Pool.QueryRow(context.Background(), "SELECT status, stage, pass FROM pepsi.state WHERE id = $1", id).
		Scan(&status, &stage, &pass)
	if err != nil {
		f.t.Fatal(err)
	}
	return
}

// idLine is message id's id line, with its pass's token unless it is 0.
func idLine(id, pass int64) string {
	return string(protocol.AppendIDLine(nil, id, pass))
}

// TestRunTokens: Run with Options.Protocol 2 says hello first, then
// serves id lines with and without a token, mixed, in every order of
// lone and chained reads: a pass with a token reads its message without
// locking its queue row and presents the token on its move, a bare id
// locks the row as ever, and a token that is not the row's current pass
// is refused before the stage function is called.
func TestRunTokens(t *testing.T) {
	f := newFixture(t)
	ids, passes := f.claimed("tok", "bare", "tok", "stale", "bare", "tok")
	lines := []int64{passes[0], 0, passes[2], passes[3] + 1, 0, passes[5]}
	var in strings.Builder
	given := map[int64]int64{}
	for i, id := range ids {
		in.WriteString(idLine(id, lines[i]))
		given[id] = lines[i]
	}
	// Reads: 1 alone, 2 and 3 with the COMMIT before, 4 with the COMMIT
	// before and again alone (it fails), 5 alone, 6 with the COMMIT before.
	locked := map[int64]bool{}
	var called []int64
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		called = append(called, m.ID)
		if _, err := f.db.Pool.Exec(ctx, "SELECT FROM pepsi.state WHERE id = $1 FOR UPDATE NOWAIT", m.ID); err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != pgerrcode.LockNotAvailable {
				return worker.Move{}, err
			}
			locked[m.ID] = true
		}
		if _, err := m.Tx.Exec(ctx, "INSERT INTO side VALUES ($1)", m.ID); err != nil {
			return worker.Move{}, err
		}
		if m.Pass != given[m.ID] {
			return worker.Move{}, fmt.Errorf("Message.Pass %d, want %d", m.Pass, given[m.ID])
		}
		return worker.Advance("b"), nil
	}
	var out bytes.Buffer
	opts := f.opts(strings.NewReader(in.String()), &out)
	opts.Protocol = protocol.Version
	if err := worker.Run(context.Background(), fn, opts); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("1 # message %d is not running pass %d: that pass is over (it runs pass %d at stage a)", ids[3], lines[3], passes[3])
	if want := protocol.HelloTrace + "\n0\n0\n0\n" + stale + "\n0\n0\n"; out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	for i, id := range ids {
		status, stage, _ := f.queueRow(id)
		wantStage, wantSide, wantLocked := "b", int64(1), lines[i] == 0
		if i == 3 {
			wantStage, wantSide = "a", 0
		}
		if status != statusAt(wantStage) || stage != wantStage || f.sideEffects(id) != wantSide {
			t.Errorf("message %d (line %q): %s at %s, %d side effects; want %s at %s, %d", id, idLine(id, lines[i]), status, stage, f.sideEffects(id), statusAt(wantStage), wantStage, wantSide)
		}
		if i != 3 && locked[id] != wantLocked {
			t.Errorf("message %d (line %q): queue row locked during the pass %v, want %v", id, idLine(id, lines[i]), locked[id], wantLocked)
		}
	}
	if len(called) != 5 {
		t.Errorf("stage function called for %v, want every message but the stale pass's", called)
	}

	// Without Options.Protocol: no hello.
	ids, passes = f.claimed("tok")
	out.Reset()
	opts = f.opts(strings.NewReader(idLine(ids[0], passes[0])), &out)
	if err := worker.Run(context.Background(), byPayload, opts); err != nil {
		t.Fatal(err)
	}
	if out.String() != `1 # unknown payload`+"\n" {
		t.Errorf("output %q without Options.Protocol, want the answer alone", out.String())
	}
}

// TestRunTokenFail: in OnStatusLine mode, worker.Fail is carried out by
// the stage with the pass's token: refused for a pass that is over.
func TestRunTokenFail(t *testing.T) {
	f := newFixture(t)
	ids, passes := f.claimed("x", "y")
	fail := func(context.Context, *worker.Message) (worker.Move, error) { return worker.Fail("no good"), nil }
	var out bytes.Buffer
	in := idLine(ids[0], passes[0]) + idLine(ids[1], passes[1]+1)
	if err := worker.Run(context.Background(), fail, f.statusLineOpts(in, &out)); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0\n1 # ERROR: pepsi.fail: message %d is not running pass %d: that pass is over (SQLSTATE 55000)\n", ids[1], passes[1]+1)
	if out.String() != want {
		t.Errorf("answers %q, want %q", out.String(), want)
	}
	for i, w := range []string{"failed", "running"} {
		if status, _, _, _ := f.row(ids[i]); status != w {
			t.Errorf("message %d %s, want %s", ids[i], status, w)
		}
	}
}

// TestOneTripStalePass is issue 49's OneTrip gap: a pass's batch that the
// server is still executing when the dispatcher gives the pass up (a
// timeout) and the message is claimed again at the same stage. With its
// token the late move is refused and its work rolled back; with a bare
// id (a stage that never said hello, or pkg/worker before the token) it
// commits into the new pass, which is what the token fixes.
func TestOneTripStalePass(t *testing.T) {
	for _, token := range []bool{true, false} {
		t.Run(fmt.Sprintf("token=%v", token), func(t *testing.T) { oneTripStale(t, token) })
	}
}

// staleLock is the advisory lock a stale pass waits for.
const staleLock = 4949

func oneTripStale(t *testing.T, token bool) {
	f := newFixture(t)
	ctx := context.Background()
	ids, passes := f.claimed("x")
	id, p1 := ids[0], passes[0]
	holder, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", staleLock); err != nil {
		t.Fatal(err)
	}
	fn := func(_ context.Context, m *worker.Message) (worker.Move, error) {
		m.Queue("INSERT INTO side VALUES ($1)", m.ID)
		m.Queue("SELECT pg_advisory_xact_lock($1)", staleLock) // the server is slow with this batch
		return worker.Advance("b"), nil
	}
	line := idLine(id, 0)
	if token {
		line = idLine(id, p1)
	}
	var out bytes.Buffer
	opts := f.opts(strings.NewReader(line), &out)
	opts.Mode, opts.Stage = worker.OneTrip, "a"
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx, fn, opts) }()
	testkit.Wait(t, "the pass's batch to wait for the lock", 30*time.Second, func() bool {
		var n int64
		_ = f.db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&n)
		return n == 1
	})
	// The dispatcher times the pass out and claims the message again.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p2 := f.giveUp(sctx, id, p1)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", staleLock); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	status, stage, pass := f.queueRow(id)
	if token {
		want := fmt.Sprintf("1 # ERROR: pepsi.advance: message %d is not running pass %d: that pass is over (SQLSTATE 55000)\n", id, p1)
		if out.String() != want || f.sideEffects(id) != 0 || status != "running" || stage != "a" || pass != p2 {
			t.Errorf("the stale pass answered %q, %d side effects, row %s at %s pass %d; want %q, 0, running at a pass %d",
				out.String(), f.sideEffects(id), status, stage, pass, want, p2)
		}
		return
	}
	// Fenced by the status alone, the stale pass moves the new pass's row.
	if out.String() != "0\n" || f.sideEffects(id) != 1 || status != "pending" || stage != "b" || pass != p2 {
		t.Errorf("bare id: answered %q, %d side effects, row %s at %s pass %d; want the stale move committed (0, 1, pending at b pass %d)",
			out.String(), f.sideEffects(id), status, stage, pass, p2)
	}
}

// TestRunStalePass is the same race in the default mode: the pass has
// read its message when the dispatcher gives it up and claims it again.
// With its token, the read took no lock, so the settle goes ahead at once,
// and the stale pass's move is refused, its work rolled back. With a bare
// id the read locked the row: the settle waits for the pass, and finds
// the message moved on.
func TestRunStalePass(t *testing.T) {
	t.Run("token", func(t *testing.T) {
		f := newFixture(t)
		ids, passes := f.claimed("x")
		id, p1 := ids[0], passes[0]
		var p2 int64
		fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
			if _, err := m.Tx.Exec(ctx, "INSERT INTO side VALUES ($1)", m.ID); err != nil {
				return worker.Move{}, err
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			p2 = f.giveUp(sctx, id, p1)
			return worker.Advance("b"), nil
		}
		var out bytes.Buffer
		if err := worker.Run(context.Background(), fn, f.opts(strings.NewReader(idLine(id, p1)), &out)); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("1 # ERROR: pepsi.advance: message %d is not running pass %d: that pass is over (SQLSTATE 55000)\n", id, p1)
		status, stage, pass := f.queueRow(id)
		if out.String() != want || f.sideEffects(id) != 0 || status != "running" || stage != "a" || pass != p2 {
			t.Errorf("the stale pass answered %q, %d side effects, row %s at %s pass %d; want %q, 0, running at a pass %d",
				out.String(), f.sideEffects(id), status, stage, pass, want, p2)
		}
	})
	t.Run("bare", func(t *testing.T) {
		f := newFixture(t)
		ids, passes := f.claimed("x")
		id, p1 := ids[0], passes[0]
		settled := make(chan queue.TurnResult, 1)
		fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
			go func() {
				var res queue.TurnResult
				_ = f.db.RunTurn(context.Background(), queue.Turn{Settles: []queue.Settle{{
					ID: id, Stage: "a", Pass: p1, Verdict: queue.PassFailed, Kind: queue.FailTimeout,
					Reason: "timeout", Retry: queue.RetryPolicy{Retries: 5},
				}}}, &res)
				settled <- res
			}()
			waitLockWait(t, f)
			return worker.Advance("b"), nil
		}
		var out bytes.Buffer
		if err := worker.Run(context.Background(), fn, f.opts(strings.NewReader(idLine(id, 0)), &out)); err != nil {
			t.Fatal(err)
		}
		var res queue.TurnResult
		select {
		case res = <-settled:
		case <-time.After(30 * time.Second):
			t.Fatal("the settle did not end")
		}
		status, stage, _ := f.queueRow(id)
		if out.String() != "0\n" || len(res.Settled) != 1 || res.Settled[0].Outcome != queue.OutRequeued || status != "pending" || stage != "b" {
			t.Errorf("answered %q, settled %+v, row %s at %s; want 0, requeued, pending at b", out.String(), res.Settled, status, stage)
		}
	})
}

// waitLockWait waits until a session of the test's pool waits for a lock.
func waitLockWait(t *testing.T, f *fixture) {
	t.Helper()
	testkit.Wait(t, "the settle to wait for the pass's row lock", 30*time.Second, func() bool {
		var n int64
		_ = f.db.Pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		return n == 1
	})
}
