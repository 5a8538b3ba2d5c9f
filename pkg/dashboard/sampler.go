package dashboard

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The throughput charts are drawn from samples of pepsi.stage_stats that
// the server takes every few seconds and keeps in memory for the length of
// the charts, one a bar also in the database (history.go): a restart
// reads those back. The dispatcher writes its
// statistics every STATS_INTERVAL (and when it goes idle), so a chart is
// no finer than that: with the default 60 s, one step of a minute.

// chartBins is how many bars a throughput chart has.
const chartBins = 15

// sample is the statistics' totals at one moment.
type sample struct {
	at     time.Time
	ok     map[string]int64 // processed passes by stage
	failed map[string]int64 // failed passes by stage: failed answers, timeouts, crashes
}

// bin is one bar of a chart: the passes per second over [Start, End).
type bin struct {
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Known  bool      `json:"known"` // false before enough samples were taken
	OK     float64   `json:"ok_per_second"`
	Failed float64   `json:"failed_per_second"`
	// FailedMessages are the messages that failed in the bar's span and
	// are failed still (see failures.Messages): read from the queue, not
	// sampled.
	FailedMessages int64 `json:"failed_messages"`
}

// sampler keeps the samples of the last window.
type sampler struct {
	window, every time.Duration

	mu      sync.Mutex
	samples []sample // oldest first
	history history
}

func newSampler(window, every time.Duration) *sampler {
	return &sampler{window: window, every: every}
}

// take reads the statistics and adds them as a sample; it returns them,
// and when it read them.
func (s *sampler) take(ctx context.Context, db *admin.DB) ([]queue.StageStats, time.Time, error) {
	stages, _, err := db.ReadStats(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	at := time.Now()
	s.add(at, stages)
	return stages, at, nil
}

// add records the totals read at at, in time order, and forgets the
// samples no chart needs any more.
func (s *sampler) add(at time.Time, stages []queue.StageStats) {
	x := sample{at: at, ok: make(map[string]int64, len(stages)), failed: make(map[string]int64, len(stages))}
	for _, st := range stages {
		x.ok[st.Stage] = st.Processed
		x.failed[st.Stage] = st.Failed + st.Timeouts + st.Crashes
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.samples, at, func(x sample, t time.Time) int { return x.at.Compare(t) })
	s.samples = slices.Insert(s.samples, i, x)
	keep := s.samples[len(s.samples)-1].at.Add(-s.window - 2*s.every)
	i = 0
	for i < len(s.samples)-1 && s.samples[i+1].at.Before(keep) {
		i++
	}
	s.samples = s.samples[i:]
}

// bins returns stage's chart ending at now, oldest bar first.
func (s *sampler) bins(stage string, now time.Time) []bin {
	s.mu.Lock()
	defer s.mu.Unlock()
	width := s.window / chartBins
	out := make([]bin, chartBins)
	for i := range out {
		end := now.Add(-time.Duration(chartBins-1-i) * width)
		b := bin{Start: end.Add(-width), End: end}
		from, to := s.around(b.Start, b.End)
		if from != nil && to != nil && to.at.After(from.at) {
			secs := to.at.Sub(from.at).Seconds()
			b.Known = true
			b.OK = float64(max(to.ok[stage]-from.ok[stage], 0)) / secs
			b.Failed = float64(max(to.failed[stage]-from.failed[stage], 0)) / secs
		}
		out[i] = b
	}
	return out
}

// around returns the samples that bound [start, end): the last one at or
// before start (or else the first one after it), and the last one at or
// before end.
func (s *sampler) around(start, end time.Time) (from, to *sample) {
	for i := range s.samples {
		x := &s.samples[i]
		if x.at.After(end) {
			break
		}
		if !x.at.After(start) || from == nil {
			from = x
		}
		to = x
	}
	return from, to
}

// failures is a stage's failed passes and all its passes (ok and failed)
// over the window ending at now, from the samples within it and the last
// one before it, and the time they span (less than the window while the
// server has not sampled it all); ok is false with fewer than two samples. A counter that went down
// (its row deleted) adds nothing.
func (s *sampler) failures(stage string, now time.Time) (failed, passes int64, spans time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := now.Add(-s.window)
	var prev *sample
	for i := range s.samples {
		x := &s.samples[i]
		if x.at.After(now) {
			break
		}
		if x.at.Before(start) {
			prev = x // the last one before the window bounds it
			continue
		}
		if prev != nil {
			f := max(x.failed[stage]-prev.failed[stage], 0)
			failed += f
			passes += f + max(x.ok[stage]-prev.ok[stage], 0)
			spans += x.at.Sub(prev.at)
			ok = true
		}
		prev = x
	}
	return failed, passes, spans, ok
}

// stages names the stages of the latest sample.
func (s *sampler) stages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return nil
	}
	var out []string
	for st := range s.samples[len(s.samples)-1].ok {
		out = append(out, st)
	}
	return out
}
