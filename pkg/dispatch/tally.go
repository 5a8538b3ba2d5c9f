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
	case s.Changed() && s.After == queue.Pending && s.Stage != s.Handed:
		g.Requeued++
	case s.Changed() && s.After == queue.Pending:
		g.Reset++
	case s.After == queue.Failed:
		g.Failed++
	case s.After == queue.Paused:
		g.Paused++
	case s.After == queue.Done:
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

// take returns the deltas to write, appending the stages' to buf, and
// forgets them: restore gives them back if the write fails.
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

// restore adds back deltas that take returned and that were not written.
func (t *tally) restore(stages []queue.StageStats, g queue.DispatchStats) {
	for i := range stages {
		s, d := t.stage(stages[i].Stage), &stages[i]
		s.Processed += d.Processed
		s.Failed += d.Failed
		s.Timeouts += d.Timeouts
		s.Crashes += d.Crashes
		s.BusySeconds += d.BusySeconds
	}
	a := &t.global
	a.Claimed += g.Claimed
	a.StagePasses += g.StagePasses
	a.Requeued += g.Requeued
	a.Done += g.Done
	a.Failed += g.Failed
	a.Paused += g.Paused
	a.Resumed += g.Resumed
	a.Reset += g.Reset
	a.Orphans += g.Orphans
	a.Expired += g.Expired
	t.dirty = t.dirty || !g.IsZero() || len(stages) > 0
}
