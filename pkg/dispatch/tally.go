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

// settled books what Settle found for one message.
func (t *tally) settled(s *queue.Settled) {
	g := &t.global
	t.dirty = true
	switch {
	case s.Set == queue.Pending && s.Stage != s.Handed:
		g.Requeued++
	case s.Set == queue.Pending:
		g.Reset++
	case s.Set == queue.Failed:
		g.Failed++
	case s.Set == queue.Paused:
		g.Paused++
	case s.Set == queue.Done:
		g.Done++
	case s.Status == queue.Done:
		g.Done++
	case s.Status == queue.Failed:
		g.Failed++
	case s.Status == queue.Paused:
		g.Paused++
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

// snapshot returns the deltas to write.
func (t *tally) snapshot() ([]queue.StageStats, queue.DispatchStats) {
	out := make([]queue.StageStats, 0, len(t.stages))
	for _, s := range t.stages {
		if !s.IsZero() {
			out = append(out, *s)
		}
	}
	return out, t.global
}

// reset forgets the deltas after they were written.
func (t *tally) reset() {
	for _, s := range t.stages {
		*s = queue.StageStats{Stage: s.Stage}
	}
	t.global = queue.DispatchStats{}
	t.dirty = false
}
