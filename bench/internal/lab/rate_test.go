package lab

import (
	"slices"
	"testing"
	"time"
)

func TestPerSecond(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	read := map[int64]time.Time{}
	for i, ms := range []int{-1, 2500, 0, 500, 999, 1000, 3000, 2999} {
		read[int64(i)] = t0.Add(time.Duration(ms) * time.Millisecond)
	}
	// What comes before from and after the last second is left out.
	if got, want := perSecond(read, t0, 3), []int{3, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("per second %v, want %v", got, want)
	}
	if got := perSecond(nil, t0, 2); !slices.Equal(got, []int{0, 0}) {
		t.Errorf("nothing read: %v", got)
	}
}

func TestRateFigures(t *testing.T) {
	b := &bench{report: &Report{}}
	b.rateFigures([]int{204, 196, 200, 211}, 300*time.Millisecond, 4*time.Second)
	for key, want := range map[string]struct {
		value float64
		met   string
	}{
		"rate.mean": {202.75, "ok"}, "rate.min": {196, "ok"}, "rate.max": {211, "MISS"}, "rate.cpu": {7.5, ""},
	} {
		f := b.report.Figure(key)
		if f == nil {
			t.Errorf("no figure %s", key)
			continue
		}
		if f.Value != want.value || f.Met != want.met {
			t.Errorf("%s: %v %q, want %v %q", key, f.Value, f.Met, want.value, want.met)
		}
	}
	if f := b.report.Figure("rate.mean"); f != nil && f.Ratio != f.Value/benchRate {
		t.Errorf("rate.mean: ratio %v, want the value over %d", f.Ratio, benchRate)
	}
}

func TestRateCPUFigure(t *testing.T) {
	for _, c := range []struct {
		cpu   time.Duration
		value float64
		met   string
	}{{400 * time.Millisecond, 4, "ok"}, {500 * time.Millisecond, 5, "MISS"}, {900 * time.Millisecond, 9, "MISS"}} {
		b := &bench{report: &Report{}}
		b.rateCPUFigure([]int{100, 101, 99}, c.cpu, 10*time.Second)
		f := b.report.Figure("ratecpu")
		if f == nil {
			t.Fatal("no figure ratecpu")
		}
		if f.Value != c.value || f.Met != c.met || f.Target != "< 5 %" {
			t.Errorf("%v CPU in 10 s: %v %q (target %q), want %v %q", c.cpu, f.Value, f.Met, f.Target, c.value, c.met)
		}
	}
}
