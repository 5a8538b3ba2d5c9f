package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// TraceEnv names the file into which bench stages write, for every id they
// read, "STAGE ID UNIXNANOS" (the wake latency run sets it).
const TraceEnv = "PEPSI_BENCH_TRACE"

// ProfileEnv names a directory into which bench stages write a CPU
// profile each (stage-STAGE-PID.prof), for looking into where a pass's
// CPU goes: go tool pprof.
const ProfileEnv = "PEPSI_BENCH_CPUPROFILE"

// StageOptions configure the benchmark's stage program, a pkg/worker
// stage that "pepsi-bench stage" runs.
type StageOptions struct {
	// Mode InTransaction: each message's pass runs one single-row UPDATE
	// of bench.work in the message's transaction (queued with
	// Message.Queue: it goes out with the transition and COMMIT).
	// Mode OnStatusLine: no database work; the transition is answered on
	// the status line.
	Mode    worker.Mode
	Next    string // the stage to advance to; "" finishes the message
	DSN     string
	Stage   string // PEPSI_STAGE
	In      io.Reader
	Out     io.Writer
	Log     *slog.Logger
	Trace   string // see TraceEnv; "" for none
	Profile string // see ProfileEnv; "" for none
}

// Stage runs the benchmark's stage program until o.In ends or ctx is done.
func Stage(ctx context.Context, o StageOptions) error {
	if o.Profile != "" {
		f, err := os.Create(filepath.Join(o.Profile, fmt.Sprintf("stage-%s-%d.prof", o.Stage, os.Getpid())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	in := o.In
	if o.Trace != "" {
		f, err := os.OpenFile(o.Trace, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		in = &tracer{r: in, w: f, prefix: []byte(o.Stage + " ")}
	}
	out := worker.Finish()
	if o.Next != "" {
		out = worker.Advance(o.Next)
	}
	slot := int64(os.Getpid())
	var fn worker.Func
	switch o.Mode {
	case worker.OnStatusLine:
		fn = func(context.Context, *worker.Message) (worker.Move, error) { return out, nil }
	default:
		made := false
		fn = func(ctx context.Context, m *worker.Message) (worker.Move, error) {
			if !made {
				if _, err := m.Tx.Exec(ctx, workRowSQL, slot); err != nil {
					return worker.Move{}, err
				}
				made = true
			}
			// Its result is not needed: it goes out with the move.
			m.Queue(workSQL, slot)
			return out, nil
		}
	}
	err := worker.Run(ctx, fn, worker.Options{DSN: o.DSN, AppName: "pepsi bench stage " + o.Stage,
		In: in, Out: o.Out, Log: o.Log, Mode: o.Mode, Stage: o.Stage})
	if ctx.Err() != nil {
		return nil // told to stop
	}
	return err
}

// tracer passes reads through and writes, for each whole line read, the
// line and the time it was read, one write per read.
type tracer struct {
	r       io.Reader
	w       io.Writer
	prefix  []byte
	partial []byte
	buf     []byte
}

func (t *tracer) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		now := strconv.AppendInt(nil, time.Now().UnixNano(), 10)
		t.buf = t.buf[:0]
		data := p[:n]
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				t.partial = append(t.partial, data...)
				break
			}
			t.buf = append(t.buf, t.prefix...)
			t.buf = append(t.buf, t.partial...)
			t.buf = append(t.buf, data[:i]...)
			t.buf = append(t.buf, ' ')
			t.buf = append(t.buf, now...)
			t.buf = append(t.buf, '\n')
			t.partial, data = t.partial[:0], data[i+1:]
		}
		if len(t.buf) > 0 {
			_, _ = t.w.Write(t.buf)
		}
	}
	return n, err
}
