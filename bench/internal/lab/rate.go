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
// whole second (read on the workers' standard input: the trace) and the
// dispatcher's CPU meanwhile. The count starts a second after the first
// message is done: the ids handed to a worker while it starts are read
// at once when it is up, and would count in its first second.
func (b *bench) rate(ctx context.Context) error {
	secs := int(math.Ceil(b.o.RateTime.Seconds()))
	p := pipeline{name: "rate", mode: "statusline", stages: b.stages[:1], parallelism: []int{b.o.Parallelism},
		queueLimit: b.o.QueueLimit, trace: b.path("rate.trace"), rate: fmt.Sprintf("%d/s", benchRate)}
	if err := b.reset(ctx); err != nil {
		return err
	}
	// Twice what the run hands out, and a few seconds more: the queue
	// never runs dry, even at twice the rate.
	n := 2 * benchRate * (secs + 5)
	if _, err := b.enqueueBatch(ctx, n); err != nil {
		return err
	}
	b.progress("rate: RATE = %d/s, %d messages queued, %d s", benchRate, n, secs)
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return err
	}
	defer d.stop() //nolint:errcheck // a second stop is harmless
	if err := d.waitFor(ctx, "rate: no message done", time.Minute, b.anyDone); err != nil {
		return err
	}
	if err := d.run(ctx, time.Second); err != nil {
		return err
	}
	cpu0, err := procCPU(d.pid)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := d.run(ctx, time.Duration(secs)*time.Second+100*time.Millisecond); err != nil {
		return err
	}
	cpu1, err := procCPU(d.pid)
	if err != nil {
		return err
	}
	wall := time.Since(start)
	var pending int64
	if err := b.sql.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE status = 'pending'").Scan(&pending); err != nil {
		return err
	}
	if _, err := d.stop(); err != nil {
		return err
	}
	if pending == 0 {
		return fmt.Errorf("rate: the queue ran dry (%d messages) before the %d s were over", n, secs)
	}
	read, err := readTrace(p.trace, p.stages[0])
	if err != nil {
		return err
	}
	counts := perSecond(read, start, secs)
	b.rateFigures(counts, cpu1-cpu0, wall)
	return b.reset(ctx)
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
