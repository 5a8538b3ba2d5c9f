package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// tally holds the statistics deltas not yet written.
type tally struct {
	stages map[string]*queue.StageStats
	global queue.DispatchStats
	dirty  bool

	// Writes are applied at most once (queue.StatsFlush): a write that
	// failed, maybe after its commit went through, is sent again as it was.
	token     int64              // this run's
	seq       int64              // the last write's
	unflushed []queue.StatsFlush // writes that failed, in order
}

// stage returns the deltas of the named stage.
func (t *tally) stage(name string) *queue.StageStats {
	s := t.stages[name]
	if s == nil {
		if t.stages == nil {
			t.stages = make(map[string]*queue.StageStats)
		}
		s = &queue.StageStats{Stage: name}
		t.stages[name] = s
	}
	t.dirty = true
	return s
}

// settled books the outcome of one settled pass: each pass claimed is
// booked once (queue.Outcome).
func (t *tally) settled(s *queue.Settled) {
	g := &t.global
	t.dirty = true
	switch s.Outcome {
	case queue.OutRequeued:
		g.Requeued++
	case queue.OutReset:
		g.Reset++
	case queue.OutCancelled:
		g.Cancelled++
	case queue.OutFailed:
		g.Failed++
	case queue.OutPaused:
		g.Paused++
	case queue.OutDone:
		g.Done++
	}
}

// answered books one answered pass of stage and the stages fused into it.
// The fused stages' seconds are booked to them and taken off stage's share
// of the pass's wall time.
func (t *tally) answered(stage string, ok bool, busy time.Duration, fused []protocol.Fused) {
	own := busy.Seconds()
	t.global.StagePasses++
	for _, f := range fused {
		fs := t.stage(f.Stage)
		fs.Processed++
		fs.BusySeconds += f.Seconds
		own -= f.Seconds
		t.global.StagePasses++
	}
	s := t.stage(stage)
	if ok {
		s.Processed++
	} else {
		s.Failed++
	}
	s.BusySeconds += max(own, 0)
}

// cancelled books the pass of v, whose message was cancelled while it
// ran, as cancelled at its stage, taking back the processed or failed its
// answer booked: a cancelled pass's outcome is ignored. A timeout or a
// crash stays booked: those count the stage's workers, not its answers.
func (t *tally) cancelled(v *queue.Settle) {
	s := t.stage(v.Stage)
	switch {
	case v.Verdict == queue.NotRun:
		return // it never ran
	case v.Verdict != queue.PassFailed:
		s.Processed--
	case v.Kind == queue.FailAnswer || v.Kind == queue.FailProtocol:
		s.Failed--
	}
	s.Cancelled++
}

// joined books the joins settled: parents released at their join stage,
// and parents failed there.
func (t *tally) joined(js []queue.Joined) {
	for _, j := range js {
		if j.Failed {
			t.global.JoinFailed++
		} else {
			t.global.Joined++
		}
		t.dirty = true
	}
}

// take returns the deltas to write, appending the stages' to buf, and
// forgets them.
func (t *tally) take(buf []queue.StageStats) ([]queue.StageStats, queue.DispatchStats) {
	for _, s := range t.stages {
		if !s.IsZero() {
			buf = append(buf, *s)
		}
		*s = queue.StageStats{Stage: s.Stage}
	}
	g := t.global
	t.global = queue.DispatchStats{}
	t.dirty = false
	return buf, g
}

// pending reports whether there is something to write.
func (t *tally) pending() bool { return t.dirty || len(t.unflushed) > 0 }

// flushes returns the writes to send, appended to dst[:0]: those that
// failed, as they were, and the deltas since as a new one.
func (t *tally) flushes(dst []queue.StatsFlush) []queue.StatsFlush {
	dst = append(dst[:0], t.unflushed...)
	if t.dirty {
		t.seq++
		stages, g := t.take(nil)
		dst = append(dst, queue.StatsFlush{Token: t.token, Seq: t.seq, Stages: stages, Global: g})
	}
	return dst
}

// flushed notes how the write of fs went.
func (t *tally) flushed(fs []queue.StatsFlush, ok bool) {
	t.unflushed = t.unflushed[:0]
	if !ok {
		t.unflushed = append(t.unflushed, fs...)
	}
}
