package dispatch

import (
	"fmt"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// handle applies one worker event to the loop's state.
func (d *Dispatcher) handle(ev event) {
	w := ev.w
	switch ev.kind {
	case evAnswers:
		d.answers(w, ev.answers)
	case evProtocol:
		d.protocolError(w, "protocol error: "+ev.err.Error())
	case evEOF:
		if !w.stopping && !w.gone {
			d.log.Warn("worker closed its stdout; killing it", "stage", w.pool.cfg.Name, "pid", w.proc.pid)
			w.gone = true
			d.stop(w, d.now(), true)
			w.killAt = d.now()
			d.due(w.killAt)
		}
	case evExit:
		d.exited(w, ev.err)
	case evHello:
		w.tokens = true // the ids written before went without: the worker takes both
	case evHelloTrace:
		d.helloTrace(w, ev.err == nil)
	}
}

// answers books status lines, in order, against the worker's pipeline.
func (d *Dispatcher) answers(w *worker, answers []protocol.Status) {
	if w.gone {
		return
	}
	now := d.now()
	stage := w.pool.cfg.Name
	for i := range answers {
		st := &answers[i]
		if w.inflight.len() == 0 {
			d.protocolError(w, "protocol error: status line with no message outstanding")
			return
		}
		h := w.inflight.pop()
		w.answered++
		if st.Code == protocol.NotRun {
			// The stage could not reach its database: no pass was made.
			d.notRunAnswer(w.pool, h, st.Text, now)
			w.headAt = now
			continue
		}
		d.tally.answered(stage, st.Code == 0, now.Sub(w.headAt), st.Fused)
		d.observePass(stage, st, now.Sub(w.headAt))
		if st.Code == 0 {
			d.plan.verdict(answered(h, stage, st))
		} else {
			reason := fmt.Sprintf("stage %s answered %d", stage, st.Code)
			if st.Text != "" {
				reason += ": " + st.Text
			}
			d.failedPass(w.pool, h, queue.FailAnswer, w.proc.pid, reason)
		}
		w.headAt = now
	}
	if w.pool.cfg.Keyed() {
		d.plan.keyedAnswers() // its keys are held until the settle
	}
	if w.inflight.len() == 0 {
		w.idleAt = now
		d.due(now.Add(d.cfg.Dispatch.WorkerIdleTimeout))
		if w.draining {
			d.due(now)
		}
	}
}

// failedPass books a failed pass h at p's stage, of kind, by the worker
// of process pid: the message fails, or is paused for a retry while the
// stage's RETRIES allow.
func (d *Dispatcher) failedPass(p *pool, h pass, kind queue.FailKind, pid int, reason string) {
	v := h.settle(p.cfg.Name, queue.PassFailed)
	v.Reason, v.Retry, v.Kind, v.PID = reason, p.retry, kind, int32(pid)
	d.plan.verdict(v)
}

// observePass reports an answered pass and the stages fused into it.
func (d *Dispatcher) observePass(stage string, st *protocol.Status, busy time.Duration) {
	if st.Code != 0 {
		d.obs.Passed(stage, ResultFailed, busy)
		return
	}
	for _, f := range st.Fused {
		fused := time.Duration(f.Seconds * float64(time.Second))
		d.obs.Passed(f.Stage, ResultOK, fused)
		busy -= fused
	}
	d.obs.Passed(stage, ResultOK, max(busy, 0))
}

// answered is the verdict for a 0 answer: the transition it carries, if any.
func answered(h pass, stage string, st *protocol.Status) queue.Settle {
	v := h.settle(stage, queue.PassOK)
	switch st.Move {
	case protocol.Advance:
		v.Verdict, v.Next = queue.Advance, st.Next
	case protocol.Finish:
		v.Verdict = queue.Finish
	case protocol.Pause:
		v.Verdict, v.Delay = queue.Pause, time.Duration(st.Delay*float64(time.Second))
	case protocol.Join:
		v.Verdict, v.Next = queue.Join, st.Next
	}
	return v
}

// protocolError fails the worker's head message with reason, puts the rest
// back and stops the worker.
func (d *Dispatcher) protocolError(w *worker, reason string) {
	if w.gone {
		return
	}
	d.log.Warn("worker broke the protocol; stopping it", "stage", w.pool.cfg.Name, "pid", w.proc.pid, "reason", reason)
	if w.inflight.len() > 0 {
		d.tally.stage(w.pool.cfg.Name).Failed++
		d.obs.Passed(w.pool.cfg.Name, ResultProtocol, d.now().Sub(w.headAt))
	}
	d.abandon(w, queue.FailProtocol, reason)
	d.stop(w, d.now(), true)
}

// timeout kills a worker whose head message went unanswered for MAX_RUNTIME.
func (d *Dispatcher) timeout(w *worker, now time.Time) {
	max := d.cfg.Dispatch.MaxRuntime
	d.log.Warn("message timed out; killing worker", "stage", w.pool.cfg.Name, "pid", w.proc.pid,
		"max_runtime", max, "pipelined", w.inflight.len()-1)
	d.tally.stage(w.pool.cfg.Name).Timeouts++
	d.obs.Passed(w.pool.cfg.Name, ResultTimeout, now.Sub(w.headAt))
	d.abandon(w, queue.FailTimeout, fmt.Sprintf("timeout: no answer within MAX_RUNTIME (%s)", max))
	d.stop(w, now, true)
	w.proc.signal(sigKill)
	w.killAt = time.Time{}
}

// abandon fails the worker's head message (a failed pass of kind) with
// reason and puts the rest back; the worker's later output is ignored.
func (d *Dispatcher) abandon(w *worker, kind queue.FailKind, reason string) {
	d.abandonWith(w, func(p *pool, h pass) { d.failedPass(p, h, kind, w.proc.pid, reason) })
}

// abandonWith is abandon with the head message's verdict given by head.
func (d *Dispatcher) abandonWith(w *worker, head func(p *pool, h pass)) {
	w.gone = true
	hs := w.inflight.drain()
	stage := w.pool.cfg.Name
	for i, h := range hs {
		if i == 0 {
			head(w.pool, h)
		} else {
			d.plan.verdict(h.settle(stage, queue.NotRun))
		}
	}
}

// exited removes a worker whose process ended. A worker that ends with
// messages outstanding crashed: its head fails and the rest go back; one
// that exits protocol.NotRun could not reach its database, and all go
// back, as does a crash's head while the database is out (crashHead).
func (d *Dispatcher) exited(w *worker, err error) {
	p := w.pool
	p.remove(w)
	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	switch {
	case w.inflight.len() > 0 && w.stopping && !w.gone:
		d.log.Debug("worker stopped with messages outstanding", "stage", p.cfg.Name, "pid", w.proc.pid,
			"status", status, "outstanding", w.inflight.len())
		for _, h := range w.inflight.drain() {
			d.plan.verdict(h.settle(p.cfg.Name, queue.NotRun))
		}
	case w.inflight.len() > 0 && exitCode(err) == protocol.NotRun:
		d.log.Warn("worker exited: its database is unreachable; its messages go back", "stage", p.cfg.Name,
			"pid", w.proc.pid, "status", status, "outstanding", w.inflight.len())
		d.abandonWith(w, func(p *pool, h pass) { d.notRunExit(p, h, d.now()) })
		if w.answered == 0 {
			d.cooldown(p, d.now(), "worker died before its first answer")
		}
	case w.inflight.len() > 0:
		d.log.Warn("worker crashed", "stage", p.cfg.Name, "pid", w.proc.pid, "status", status,
			"pipelined", w.inflight.len()-1)
		d.tally.stage(p.cfg.Name).Crashes++
		d.obs.Passed(p.cfg.Name, ResultCrash, d.now().Sub(w.headAt))
		reason := "worker crashed: " + status
		d.abandonWith(w, func(p *pool, h pass) { d.crashHead(p, h, w.proc.pid, reason) })
		if w.answered == 0 {
			d.cooldown(p, d.now(), "worker died before its first answer")
		}
	case w.stopping:
		d.log.Debug("worker exited", "stage", p.cfg.Name, "pid", w.proc.pid, "status", status, "messages", w.answered)
	default:
		d.log.Warn("worker exited unasked", "stage", p.cfg.Name, "pid", w.proc.pid, "status", status)
		if w.answered == 0 {
			d.cooldown(p, d.now(), "worker died before its first answer")
		}
	}
	if !w.stopping {
		close(w.proc.feed)
	}
	p.plan.worthClaim()
}
