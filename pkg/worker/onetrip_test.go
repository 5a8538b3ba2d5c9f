package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/worker"
	"github.com/pepsi-dev/pepsi/pkg/worker/workertest"
)

// oneTripStage, set in the environment, makes this test binary the
// OneTrip stage program oneTripDispatched (see TestMain).
const oneTripStage = "PEPSI_WORKER_TEST_ONE_TRIP"

// TestRunOneTrip: in OneTrip mode the function runs with no transaction
// and no message read, and each pass is one batch: the queued work and the
// move commit together, a failing statement or a message no longer
// running rolls the work back, and Load reads the message on request.
func TestRunOneTrip(t *testing.T) {
	f := newFixture(t)
	ids := f.running("ok", "bad", "gone", "load", "fail", "pause", "same")
	if _, err := f.db.Pool.Exec(context.Background(), "SELECT pepsi.cancel(ARRAY[$1::bigint], 'test', true)", ids[2]); err != nil {
		t.Fatal(err)
	}
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		if m.Tx != nil || m.Payload != nil || m.Stage != "a" {
			return worker.Move{}, fmt.Errorf("OneTrip gave the function %+v", m)
		}
		m.Queue("INSERT INTO side VALUES ($1)", m.ID)
		switch m.ID {
		case ids[1]:
			m.Queue("INSERT INTO side VALUES ($1, 'no such column')", m.ID)
		case ids[3]:
			if err := m.Load(ctx); err != nil {
				return worker.Move{}, err
			}
			if string(m.Payload) != "load" || m.Header("k") != "v" || m.Attempts != 1 {
				return worker.Move{}, fmt.Errorf("loaded %+v", m)
			}
			return worker.Finish(), nil
		case ids[4]:
			return worker.Fail("no good"), nil
		case ids[5]:
			return worker.Pause(90 * time.Second), nil
		case ids[6]:
			return worker.Advance("a"), nil
		}
		return worker.Advance("b"), nil
	}
	in := idLines(ids)
	conn, trips := f.traced()
	var out bytes.Buffer
	opts := f.opts(strings.NewReader(in), &out)
	opts.Conn, opts.Mode, opts.Stage = conn, worker.OneTrip, "a"
	if err := worker.Run(context.Background(), fn, opts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{"0", "1 # ", "1 # ERROR: pepsi.advance: message " + itoa(ids[2]) + " is not running (SQLSTATE 55000)", "0", "0", "0", "1 # cannot advance to a: the message is already there"}
	if len(lines) != len(want) {
		t.Fatalf("status lines %q, want %d", out.String(), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) || (w == "0") != (lines[i] == "0") {
			t.Errorf("message %d answered %q, want %q…", ids[i], lines[i], w)
		}
	}
	for i, w := range []struct {
		status, stage, err string
		side               int64
	}{
		{"pending", "b", "", 1},
		{"running", "a", "", 0},
		{"cancelled", "a", "cancelled by test", 0},
		{"done", "a", "", 1},
		{"failed", "a", "no good", 1},
		{"paused", "a", "", 1},
		{"running", "a", "", 0},
	} {
		status, stage, errText, _ := f.row(ids[i])
		if status != w.status || stage != w.stage || errText != w.err {
			t.Errorf("message %d: %s at %s (%q), want %s at %s (%q)", ids[i], status, stage, errText, w.status, w.stage, w.err)
		}
		if n := f.sideEffects(ids[i]); n != w.side {
			t.Errorf("message %d: %d side effects, want %d", ids[i], n, w.side)
		}
	}
	// One batch per pass that was sent (the refused advance is not); lone
	// statements: Load's read and the ROLLBACK after the refused move (the
	// bad INSERT failed as pgx prepared it, before BEGIN was sent).
	if trips.batches != 6 || trips.queries != 2 {
		t.Errorf("%d batches and %d lone statements, want 6 and 2", trips.batches, trips.queries)
	}
	if conn.PgConn().TxStatus() != 'I' {
		t.Errorf("Run left a transaction open (status %c)", conn.PgConn().TxStatus())
	}
}

// oneTripDispatched is the stage program of TestOneTripDispatched: it
// records each pass in side, with its token, and moves the message by its
// stage.
func oneTripDispatched(_ context.Context, m *worker.Message) (worker.Move, error) {
	if m.Tx != nil || m.Stage != os.Getenv("PEPSI_STAGE") {
		return worker.Move{}, errors.New("a transaction, or the wrong stage, in OneTrip mode")
	}
	m.Queue("INSERT INTO side VALUES ($1, $2, $3)", m.ID, m.Stage, m.Pass)
	if m.Stage == "ot1" {
		return worker.Advance("ot2"), nil
	}
	return worker.Finish(), nil
}

// TestOneTripDispatched runs a OneTrip stage program (this test binary,
// see TestMain) under a real dispatcher at the seed's QUEUE_LIMIT: every
// message passes both stages, each pass's work committed exactly once.
// The stage says hello (the dispatcher sets PEPSI_PROTOCOL): its passes
// come with their tokens, the claim's.
func TestOneTripDispatched(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(oneTripStage, "1")
	p := workertest.Start(t,
		workertest.Stage{Name: "ot1", Program: self, Parallelism: 2, QueueLimit: 4},
		workertest.Stage{Name: "ot2", Program: self, Parallelism: 2, QueueLimit: 4})
	if _, err := p.DB.Pool.Exec(context.Background(), "CREATE TABLE side (id bigint, stage text, pass bigint)"); err != nil {
		t.Fatal(err)
	}
	const n = 300
	ids := p.Enqueue("ot1", make([][]byte, n)...)
	p.WaitSettled(2 * time.Minute)
	for _, id := range ids {
		if r := p.Row(id); r.Status != "done" || r.Stage != "ot2" || r.Attempts != 1 {
			t.Errorf("message %d: %+v, want done at ot2", id, r)
		}
	}
	p.Check()
	if got := p.Int64("SELECT count(*) FROM side"); got != 2*n {
		t.Errorf("%d passes' work committed, want %d", got, 2*n)
	}
	if got := p.Int64("SELECT count(DISTINCT id) FROM side"); got != n {
		t.Errorf("work committed for %d messages, want %d", got, n)
	}
	t.Logf("%d passes of %d with a token", p.Int64("SELECT count(*) FROM side WHERE pass <> 0"), 2*n)
	if got := p.Int64("SELECT count(*) FROM side WHERE pass <> 0"); got == 0 {
		t.Error("no pass came with a token")
	}
	// A message's last pass, at ot2, is the one its row records.
	if got := p.Int64("SELECT count(*) FROM side s JOIN pepsi.state USING (id) WHERE s.stage = 'ot2' AND s.pass NOT IN (0, state.pass)"); got != 0 {
		t.Errorf("%d passes at ot2 came with another token than their claim's", got)
	}
}
