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

// statusLineStage, set in the environment, makes this test binary the
// OnStatusLine stage program onStatusLine (see TestMain).
const statusLineStage = "PEPSI_WORKER_TEST_STATUS_LINE"

// onStatusLine is the stage program of TestOnStatusLineDispatched: it
// reads the payload with Load and says what to do by it and the stage.
func onStatusLine(ctx context.Context, m *worker.Message) (worker.Move, error) {
	if m.Tx != nil || m.Stage != os.Getenv("PEPSI_STAGE") {
		return worker.Move{}, errors.New("a transaction, or the wrong stage, in OnStatusLine mode")
	}
	if err := m.Load(ctx); err != nil {
		return worker.Move{}, err
	}
	switch p := string(m.Payload); {
	case p == "fail" && m.Stage == "sl2":
		return worker.Fail("no good"), nil
	case p == "pause" && m.Stage == "sl2" && m.Attempts == 1:
		return worker.Pause(10 * time.Millisecond), nil
	case m.Stage == "sl1":
		m.Fused("slx", 10*time.Millisecond)
		return worker.Advance("sl2"), nil
	}
	return worker.Finish(), nil
}

func (f *fixture) statusLineOpts(in string, out *bytes.Buffer) worker.Options {
	o := f.opts(strings.NewReader(in), out)
	o.Mode, o.Stage = worker.OnStatusLine, "a"
	return o
}

// TestRunOnStatusLine: moves are answered on the status line and the
// rows are left to the dispatcher, except for Fail; Load reads the rest
// of the message.
func TestRunOnStatusLine(t *testing.T) {
	f := newFixture(t)
	ids := f.running("a", "b", "c")
	load := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		if m.Stage != "a" || m.Payload != nil || m.Attempts != 0 {
			return worker.Move{}, fmt.Errorf("before Load: %+v", m)
		}
		if err := m.Load(ctx); err != nil {
			return worker.Move{}, err
		}
		if m.ID == ids[0] {
			if _, err := f.db.Pool.Exec(ctx, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", ids[1]); err != nil {
				return worker.Move{}, err
			}
		}
		m.Payload = append([]byte("load "), m.Payload...)
		return byPayloadNoTx(ctx, m)
	}
	var out bytes.Buffer
	in := itoa(ids[0]) + "\n" + itoa(ids[1]) + "\n999999\n"
	if err := worker.Run(context.Background(), load, f.statusLineOpts(in, &out)); err != nil {
		t.Fatal(err)
	}
	want := "0 done\n1 # message " + itoa(ids[1]) + " is not running (it is done at stage a)\n1 # message 999999 does not exist\n"
	if out.String() != want {
		t.Errorf("with Load: %q, want %q", out.String(), want)
	}

	// Without Load or Fail no connection is made: a server that does not
	// exist does no harm.
	out.Reset()
	o := f.statusLineOpts("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", &out)
	o.DSN = "postgres:///x?host=/nonexistent&connect_timeout=2"
	payloads := []string{"advance", "finish", "pause", "fused", "same", "badstage", "zero", "error", "panic", "badfused"}
	fn := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		m.Payload = []byte(payloads[m.ID-1])
		return byPayloadNoTx(ctx, m)
	}
	if err := worker.Run(context.Background(), fn, o); err != nil {
		t.Fatal(err)
	}
	want = strings.Join([]string{
		"0 next:b",
		"0 done",
		"0 pause:90",
		"0 x=0.25 y=0 done",
		"1 # cannot advance to a: the message is already there (to run it again, pause it)",
		`1 # cannot advance to "no spaces": not a stage name`,
		"1 # the stage function returned no move (use worker.Advance, Finish, Pause, Fail or Join)",
		"1 # broken in two lines",
		"1 # panic: oops",
		`1 # fused stage "x y" is not a stage name`,
	}, "\n") + "\n"
	if out.String() != want {
		t.Errorf("status lines:\n%s\nwant:\n%s", out.String(), want)
	}

	// Fail is carried out by the stage (pepsi.fail) and answered 0; a Fail
	// that needs the database when it cannot be reached ends Run after
	// answering.
	out.Reset()
	fail := func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		return worker.Fail("no good"), nil
	}
	if err := worker.Run(context.Background(), fail, f.statusLineOpts(itoa(ids[2])+"\n"+itoa(ids[2])+"\n", &out)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "0\n1 # ERROR: pepsi.fail: message "+itoa(ids[2])+" is not running") {
		t.Errorf("fail: %q", out.String())
	}
	if status, stage, errText, _ := f.row(ids[2]); status != "failed" || stage != "a" || errText != "no good" {
		t.Errorf("failed row: %s at %s, error %q", status, stage, errText)
	}
	if status, stage, _, _ := f.row(ids[0]); status != "running" || stage != "a" {
		t.Errorf("row answered \"0 done\": %s at %s, want untouched (running at a)", status, stage)
	}
	out.Reset()
	o = f.statusLineOpts("1\n2\n", &out)
	o.DSN = "postgres:///x?host=/nonexistent&connect_timeout=2"
	err := worker.Run(context.Background(), fail, o)
	if err == nil || !strings.Contains(err.Error(), "database connection lost") || !strings.HasPrefix(out.String(), "75 # database connection lost: connect to database: ") || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("fail without a database: %v, answers %q", err, out.String())
	}

	// A bad DSN is still refused up front.
	o = f.statusLineOpts("", &out)
	o.DSN = "postgres://%zz"
	if err := worker.Run(context.Background(), fail, o); err == nil || !strings.Contains(err.Error(), "bad DSN") {
		t.Errorf("bad DSN: %v", err)
	}
}

// byPayloadNoTx is byPayload without the side effect (there is no Tx).
func byPayloadNoTx(ctx context.Context, m *worker.Message) (worker.Move, error) {
	if m.Tx != nil {
		return worker.Move{}, errors.New("a transaction in OnStatusLine mode")
	}
	switch p := string(m.Payload); p {
	case "load a":
		if m.Header("k") != "v" || m.Attempts != 1 || m.CreatedAt.IsZero() {
			return worker.Move{}, fmt.Errorf("loaded %+v", m)
		}
		return worker.Finish(), nil
	case "load b", "load c":
		return worker.Finish(), nil
	case "advance":
		return worker.Advance("b"), nil
	case "finish":
		return worker.Finish(), nil
	case "pause":
		return worker.Pause(90 * time.Second), nil
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
	}
	return worker.Move{}, errors.New("unknown payload")
}

// TestOnStatusLineDispatched runs an OnStatusLine stage program (this test
// binary, see TestMain) under a real dispatcher: transitions, fused
// stages, a pause and a dead letter.
func TestOnStatusLineDispatched(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(statusLineStage, "1")
	p := workertest.Start(t,
		workertest.Stage{Name: "sl1", Program: self, Parallelism: 2, QueueLimit: 8},
		workertest.Stage{Name: "sl2", Program: self, Parallelism: 2, QueueLimit: 8})
	const n = 200
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte([]string{"ok", "fail", "pause", "ok"}[i%4])
	}
	ids := p.Enqueue("sl1", payloads...)
	p.WaitSettled(2 * time.Minute)
	for i, id := range ids {
		r := p.Row(id)
		switch string(payloads[i]) {
		case "fail":
			if r.Status != "failed" || r.Stage != "sl2" || r.Error != "no good" {
				t.Errorf("message %d: %+v, want failed at sl2", id, r)
			}
		case "pause":
			if r.Status != "done" || r.Stage != "sl2" || r.Attempts != 2 {
				t.Errorf("message %d: %+v, want done at sl2 after 2 attempts", id, r)
			}
		default:
			if r.Status != "done" || r.Stage != "sl2" || r.Attempts != 1 {
				t.Errorf("message %d: %+v, want done at sl2", id, r)
			}
		}
	}
	p.Check()
	if got := p.Int64("SELECT processed FROM pepsi.stage_stats WHERE stage = 'slx'"); got != n {
		t.Errorf("fused stage slx processed %d, want %d", got, n)
	}
	if got := p.Int64("SELECT requeued FROM pepsi.dispatch_stats"); got != n {
		t.Errorf("requeued %d, want %d (each next:sl2)", got, n)
	}
}
