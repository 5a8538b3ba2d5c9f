package lab

import (
	"context"
	"fmt"
	"math"
	"time"
)

// benchRate is the RATE of the rate step's stage, messages a second.
const benchRate = 200

// rateTolerance is how far from its RATE a second of the rate step may
// be, as a fraction.
const rateTolerance = 0.05

// rate runs one no-op status-line stage with RATE = 200/s on a queue that
// stays full for RateTime, and measures the messages handed out in each
// whole second and the dispatcher's CPU meanwhile.
func (b *bench) rate(ctx context.Context) error {
	secs := int(math.Ceil(b.o.RateTime.Seconds()))
	counts, cpu, wall, err := b.ratedRun(ctx, "rate", benchRate, secs)
	if err != nil {
		return err
	}
	b.rateFigures(counts, cpu, wall)
	return nil
}

// rateCPU runs one no-op status-line stage with RATE = 100/s on a queue
// that stays full for rateCPUTime, and measures the dispatcher's CPU
// against rateCPUTarget: a stage held back by its RATE should cost what
// its hand-outs cost, not a loop that spins while it waits for tokens.
func (b *bench) rateCPU(ctx context.Context) error {
	counts, cpu, wall, err := b.ratedRun(ctx, "ratecpu", rateCPURate, int(rateCPUTime/time.Second))
	if err != nil {
		return err
	}
	b.rateCPUFigure(counts, cpu, wall)
	return nil
}

// The rate CPU step's stage: its RATE, how long it is measured, and the
// most of a core its dispatcher may use meanwhile, in percent.
const (
	rateCPURate   = 100
	rateCPUTime   = 10 * time.Second
	rateCPUTarget = 5.0
)

// ratedRun runs one no-op status-line stage with RATE = perSec/s on a
// queue that stays full for secs seconds, and returns the messages handed
// out in each whole second (read on the workers' standard input: the
// trace) and the dispatcher's CPU over the wall time it was measured. The
// count starts a second after the first message is done: the ids handed
// to a worker while it starts are read at once when it is up, and would
// count in its first second.
func (b *bench) ratedRun(ctx context.Context, name string, perSec, secs int) (counts []int, cpu, wall time.Duration, err error) {
	p := pipeline{name: name, mode: "statusline", stages: b.stages[:1], parallelism: []int{b.o.Parallelism},
		queueLimit: b.o.QueueLimit, trace: b.path(name + ".trace"), rate: fmt.Sprintf("%d/s", perSec)}
	if err := b.reset(ctx); err != nil {
		return nil, 0, 0, err
	}
	// Twice what the run hands out, and a few seconds more: the queue
	// never runs dry, even at twice the rate.
	n := 2 * perSec * (secs + 5)
	if _, err := b.enqueueBatch(ctx, n); err != nil {
		return nil, 0, 0, err
	}
	b.progress("%s: RATE = %d/s, %d messages queued, %d s", name, perSec, n, secs)
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return nil, 0, 0, err
	}
	defer d.stop() //nolint:errcheck // a second stop is harmless
	if err := d.waitFor(ctx, name+": no message done", time.Minute, b.anyDone); err != nil {
		return nil, 0, 0, err
	}
	if err := d.run(ctx, time.Second); err != nil {
		return nil, 0, 0, err
	}
	cpu0, err := procCPU(d.pid)
	if err != nil {
		return nil, 0, 0, err
	}
	start := time.Now()
	if err := d.run(ctx, time.Duration(secs)*time.Second+100*time.Millisecond); err != nil {
		return nil, 0, 0, err
	}
	cpu1, err := procCPU(d.pid)
	if err != nil {
		return nil, 0, 0, err
	}
	wall = time.Since(start)
	var pending int64
	if err := b.sql.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE status = 'pending'").Scan(&pending); err != nil {
		return nil, 0, 0, err
	}
	if _, err := d.stop(); err != nil {
		return nil, 0, 0, err
	}
	if pending == 0 {
		return nil, 0, 0, fmt.Errorf("%s: the queue ran dry (%d messages) before the %d s were over", name, n, secs)
	}
	read, err := readTrace(p.trace, p.stages[0])
	if err != nil {
		return nil, 0, 0, err
	}
	return perSecond(read, start, secs), cpu1 - cpu0, wall, b.reset(ctx)
}

// run lets the dispatcher run for d; it fails if the dispatcher exits.
func (d *dispatchProc) run(ctx context.Context, dur time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return d.alive()
	case <-time.After(dur):
		return nil
	}
}

// anyDone reports whether a message is done.
func (b *bench) anyDone(ctx context.Context) (bool, error) {
	var done bool
	err := b.sql.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pepsi.state WHERE status = 'done')").Scan(&done)
	return done, err
}

// perSecond counts the ids read in each of the secs whole seconds from
// from on.
func perSecond(read map[int64]time.Time, from time.Time, secs int) []int {
	counts := make([]int, secs)
	for _, t := range read {
		if k := t.Sub(from); k >= 0 && k < time.Duration(secs)*time.Second {
			counts[k/time.Second]++
		}
	}
	return counts
}

// rateFigures adds the rate step's figures: handed out per second (mean,
// least and most) against the RATE, and the dispatcher's CPU.
func (b *bench) rateFigures(counts []int, cpu, wall time.Duration) {
	sum, least, most := 0, math.MaxInt, 0
	for _, c := range counts {
		sum += c
		least, most = min(least, c), max(most, c)
	}
	mean := float64(sum) / float64(len(counts))
	name := fmt.Sprintf("RATE = %d/s stage, full queue, %d s: handed out a second", benchRate, len(counts))
	of := "its RATE"
	lo, hi := benchRate*(1-rateTolerance), benchRate*(1+rateTolerance)
	target := fmt.Sprintf("%.0f to %.0f", lo, hi)
	within := func(v float64) string {
		if v >= lo && v <= hi {
			return "ok"
		}
		return "MISS"
	}
	r := b.report
	r.add(Figure{Key: "rate.mean", Name: name + ", mean", Value: mean, Unit: "msg/s", Ceiling: benchRate, Of: of, Target: target, Met: within(mean)})
	r.add(Figure{Key: "rate.min", Name: name + ", least", Value: float64(least), Unit: "msg/s", Ceiling: benchRate, Of: of, Target: target, Met: within(float64(least))})
	r.add(Figure{Key: "rate.max", Name: name + ", most", Value: float64(most), Unit: "msg/s", Ceiling: benchRate, Of: of, Target: target, Met: within(float64(most))})
	share := 100 * cpu.Seconds() / wall.Seconds()
	r.add(Figure{Key: "rate.cpu", Name: fmt.Sprintf("RATE = %d/s stage: dispatcher CPU (user + system) over %s", benchRate, wall.Round(time.Second)),
		Value: share, Unit: "% of a core", Of: "(no ceiling)"})
	if sum > 0 {
		r.note("rate: %d messages handed out in %d s; dispatcher %v CPU, %.0f µs a message", sum, len(counts), cpu, float64(cpu.Microseconds())/float64(sum))
	}
}

// rateCPUFigure adds the rate CPU step's figure: the dispatcher's CPU as a
// share of a core, against rateCPUTarget.
func (b *bench) rateCPUFigure(counts []int, cpu, wall time.Duration) {
	sum := 0
	for _, c := range counts {
		sum += c
	}
	share := 100 * cpu.Seconds() / wall.Seconds()
	met := "ok"
	if share >= rateCPUTarget {
		met = "MISS"
	}
	b.report.add(Figure{Key: "ratecpu", Name: fmt.Sprintf("RATE = %d/s stage, full queue: dispatcher CPU (user + system) over %s",
		rateCPURate, wall.Round(time.Second)), Value: share, Unit: "% of a core", Of: "(no ceiling)",
		Target: fmt.Sprintf("< %.0f %%", rateCPUTarget), Met: met})
	if sum > 0 {
		b.report.note("ratecpu: %d messages handed out in %d s (%.0f/s); dispatcher %v CPU, %.0f µs a message",
			sum, len(counts), float64(sum)/float64(len(counts)), cpu, float64(cpu.Microseconds())/float64(sum))
	}
}
