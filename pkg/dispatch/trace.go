package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
	ptrace "github.com/pepsi-dev/pepsi/pkg/trace"
	"github.com/pepsi-dev/pepsi/pkg/trace/otlp"
)

// A dispatcher with TRACING on makes one span per pass. It decides the
// pass's span context when it hands the message out, so that the stage
// can be told it on the id line, and builds the span when the verdict
// is made, from what it recorded then: the loop only fills a record and
// puts it in the exporter's bounded queue (which drops, and counts, what
// does not fit). Off, the loop's cost is a nil check per hand-out and
// per verdict.

// tracer is the loop's side of tracing; nil while TRACING is off. Only
// the loop goroutine uses it.
type tracer struct {
	ex   *otlp.Exporter
	now  func() time.Time
	open map[passKey]*otlp.Pass // handed out, no verdict yet
	free []*otlp.Pass           // records to reuse
}

// passKey is a pass: a claim's token is shared by the messages it claimed.
type passKey struct{ id, token int64 }

// startTracing makes d's tracer when its configuration turns tracing on.
func (d *Dispatcher) startTracing() error {
	if !d.cfg.Dispatch.Tracing {
		return nil
	}
	ex, err := otlp.Start(context.Background(), otlp.Options{Service: "pepsi", Log: d.log})
	if err != nil {
		return err
	}
	d.tracer = &tracer{ex: ex, now: d.now, open: make(map[passKey]*otlp.Pass)}
	d.plan.traced = d.tracer.verdict
	for _, l := range d.lanes() {
		l.traced = true
	}
	return nil
}

// stopTracing exports what is queued, giving up after a few seconds: a
// collector that is down must not hold up the stop.
func (d *Dispatcher) stopTracing() {
	if d.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.tracer.ex.Shutdown(ctx); err != nil {
		d.log.Warn("trace export did not finish", "err", err, "dropped", otlp.Dropped())
	}
}

// traced is the pass c hands out at stage p, its span begun when
// tracing is on. Off, it costs the loop a call and a nil check.
func (d *Dispatcher) traced(c *queue.Claimed, p *pool) pass {
	if t := d.tracer; t != nil {
		t.begin(c, p)
	}
	return pass{c.ID, c.Pass, c.Parent}
}

// begin records the pass of c at p, handed out now, and chooses its span
// context: a child of the message's context, or a root linking to it
// (TRACE = link).
func (t *tracer) begin(c *queue.Claimed, p *pool) {
	var r *otlp.Pass
	if n := len(t.free); n > 0 {
		r, t.free = t.free[n-1], t.free[:n-1]
	} else {
		r = new(otlp.Pass)
	}
	*r = otlp.Pass{Stage: p.cfg.Name, Link: p.cfg.TraceLink, Start: t.now(), ID: c.ID, Attempt: c.Attempt,
		Priority: c.Priority, Key: c.Key, Keyed: c.Keyed, Waited: c.Waited, Retries: p.cfg.Retries}
	if c.Trace != "" {
		r.Parent, _ = ptrace.Parse(ptrace.Split(c.Trace))
	}
	r.Span = t.ex.Begin(r.Parent, r.Link)
	t.open[passKey{c.ID, c.Pass}] = r
}

// handed notes that worker w was handed h, and appends h's id line to
// w's buffer: with its token if w asked for tokens, and its span's
// traceparent if w asked for trace contexts.
func (t *tracer) handed(w *worker, h pass) []byte {
	b := w.buf
	if w.tokens {
		b = protocol.AppendIDLine(b, h.id, h.token)
	} else {
		b = protocol.AppendIDLine(b, h.id, 0)
	}
	r := t.open[passKey{h.id, h.token}]
	if r == nil {
		return b
	}
	r.PID = w.proc.pid
	if !w.traces {
		return b
	}
	b = append(b[:len(b)-1], ' ')
	b = ptrace.AppendParent(b, r.Span)
	return append(b, '\n')
}

// verdict ends the span of the pass v settles, and queues it for export.
// A pass given back before a worker had it has no span.
func (t *tracer) verdict(v *queue.Settle) {
	k := passKey{v.ID, v.Pass}
	r := t.open[k]
	if r == nil {
		return
	}
	delete(t.open, k)
	if r.PID != 0 || v.Verdict != queue.NotRun {
		r.End = t.now()
		r.Result, r.Move, r.Next, r.Reason = outcome(v, r)
		t.ex.Emit(r)
	}
	*r = otlp.Pass{}
	t.free = append(t.free, r)
}

// outcome is what a verdict says of its pass: the result, the move, the
// stage moved to and why it failed.
func outcome(v *queue.Settle, r *otlp.Pass) (result, move, next, reason string) {
	switch v.Verdict {
	case queue.NotRun:
		return "notrun", "", "", v.Reason
	case queue.PassFailed:
		move = "fail"
		if int(r.Attempt) <= r.Retries {
			move = "retry"
		}
		result = "failed"
		switch v.Kind {
		case queue.FailCrash:
			result = "crash"
		case queue.FailTimeout:
			result = "timeout"
		case queue.FailProtocol:
			result = "protocol"
		}
		return result, move, "", v.Reason
	case queue.PassOK:
		return "ok", "", "", ""
	}
	return "ok", string(v.Verdict), v.Next, ""
}

// helloTrace notes that worker w asked for trace contexts, and for
// tokens when token: its ids go out with both while tracing is on.
func (d *Dispatcher) helloTrace(w *worker, token bool) {
	w.tokens = w.tokens || token
	w.traces = true
}

// errNoToken marks a trace hello that asked for no tokens.
var errNoToken = errors.New("no token")

// helloNoToken is the evHelloTrace event's err for hello h: nil when it
// asked for tokens too.
func helloNoToken(h protocol.Hello) error {
	if h.Token {
		return nil
	}
	return errNoToken
}
