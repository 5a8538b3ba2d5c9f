package lab

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The targets.
const (
	targetCommitRatio = 0.60   // commit pipeline passes/s, of the commit ceiling (issue 12; 0.9 before)
	targetPasses      = 30_000 // status-line pipeline, passes/s
	targetWakeP50     = 2 * time.Millisecond
	targetWakeP99     = 10 * time.Millisecond
	targetClaimRatio  = 2.0
	targetEnqueue     = 100_000 // messages/s
	targetCPU         = 10.0    // µs of dispatcher CPU per stage pass
	targetRSS         = 40.0    // MB of dispatcher peak RSS with 64 workers
)

// ceilings measures the commit ceiling on one connection (and the latency
// of one commit, the floor of the latencies) and on as many connections
// as the commit pipeline has workers.
func (b *bench) ceilings(ctx context.Context) error {
	d := b.o.CeilingTime
	b.progress("commit ceiling, 1 connection, %v", d)
	tps1, lat, per1, err := b.commitCeiling(ctx, 1, d)
	if err != nil {
		return err
	}
	q := percentiles(lat, 0.5, 0.99)
	b.commitP50, b.commitP99 = q[0], q[1]
	c := b.o.Stages * b.o.Parallelism
	b.progress("commit ceiling, %d connections, %v", c, d)
	tpsC, _, perC, err := b.commitCeiling(ctx, c, d)
	if err != nil {
		return err
	}
	b.ceilingC = tpsC
	r := b.report
	r.add(Figure{Key: "ceiling.1", Name: "commit ceiling, 1 connection", Value: tps1, Unit: "tx/s", Of: "(is a ceiling)"})
	r.add(Figure{Key: "ceiling.latency.p50", Name: "commit latency p50, 1 connection", Value: ms(q[0]), Unit: "ms", Of: "(is the floor)"})
	r.add(Figure{Key: "ceiling.latency.p99", Name: "commit latency p99, 1 connection", Value: ms(q[1]), Unit: "ms", Of: "(is the floor)"})
	r.add(Figure{Key: "ceiling.c", Name: fmt.Sprintf("commit ceiling, %d connections", c), Value: tpsC, Unit: "tx/s", Of: "(is a ceiling)"})
	r.note("commit ceiling: single-statement transactions of %q, each connection on its own row, for %v; nothing else running", ceilingSQL, d)
	r.note("commit ceiling, 1 connection: per transaction %s; %d connections: %s", per1, c, perC)
	return nil
}

// enqueue times "pepsi enqueue --lines" (COPY) against INSERT … SELECT
// of the same rows inside the server.
func (b *bench) enqueue(ctx context.Context) error {
	n := b.o.EnqueueN
	input := b.path("enqueue.txt")
	f, err := os.Create(input)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, "message %d\n", i)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	f.Close()
	conf, err := b.conf(b.newPipeline("enqueue", "statusline", len(b.stages)))
	if err != nil {
		return err
	}
	var rates []float64
	for i := range b.o.EnqueueRuns {
		if err := b.reset(ctx); err != nil {
			return err
		}
		b.progress("pepsi enqueue of %d lines, run %d of %d", n, i+1, b.o.EnqueueRuns)
		cmd := exec.CommandContext(ctx, b.o.Exe, "enqueue", "-c", conf, "--stage", b.stages[0], "--lines", "--quiet", input)
		cmd.Env = b.env(conf, "")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("enqueued %d message", n)) {
			return fmt.Errorf("pepsi enqueue: %v: %s", err, out)
		}
		rates = append(rates, float64(n)/took.Seconds())
	}
	slices.Sort(rates)
	median := rates[len(rates)/2]
	if err := b.reset(ctx); err != nil {
		return err
	}
	b.progress("INSERT … SELECT of %d messages", n)
	start := time.Now()
	if err := b.insertSelect(ctx, n, b.stages[0]); err != nil {
		return err
	}
	ceiling := float64(n) / time.Since(start).Seconds()
	b.report.add(Figure{Key: "enqueue", Name: fmt.Sprintf("pepsi enqueue --lines, %d messages (median of %d)", n, len(rates)),
		Value: median, Unit: "msg/s", Ceiling: ceiling, Of: "INSERT … SELECT generate_series in the server",
		Target: "≥ 100 000/s", Met: atLeast(median, targetEnqueue)})
	return b.reset(ctx)
}

// claim times the dispatcher's claim (16 per stage, rolled back) with 1 000
// pending rows and with ClaimRows.
func (b *bench) claim(ctx context.Context) error {
	if b.o.ClaimRows == 0 {
		return nil
	}
	small := min(1_000, b.o.ClaimRows)
	seed := func(from, to int) error { return b.seedPending(ctx, from, to, len(b.stages)) }
	caps := make([]queue.StageCap, len(b.stages))
	for i, s := range b.stages {
		caps[i] = queue.StageCap{Stage: s, Cap: 16}
	}
	timeClaims := func() (time.Duration, error) { return b.claimMedian(ctx, caps, 200) }
	if err := b.reset(ctx); err != nil {
		return err
	}
	b.progress("claim with %d pending rows", small)
	if err := seed(1, small); err != nil {
		return err
	}
	tSmall, err := timeClaims()
	if err != nil {
		return err
	}
	b.progress("claim with %d pending rows (building them)", b.o.ClaimRows)
	if err := seed(small+1, b.o.ClaimRows); err != nil {
		return err
	}
	tBig, err := timeClaims()
	if err != nil {
		return err
	}
	b.report.add(Figure{Key: "claim", Name: fmt.Sprintf("claim (16 per stage), %d pending rows, median of 200", b.o.ClaimRows),
		Value: ms(tBig), Unit: "ms", Ceiling: ms(tSmall), Of: fmt.Sprintf("the same claim with %d pending rows", small),
		Target: "≤ 2×", Met: atMost(ms(tBig)/ms(tSmall), targetClaimRatio)})
	return b.reset(ctx)
}

// commitPipeline: every pass one UPDATE plus the transition, committed in
// the worker's transaction.
func (b *bench) commitPipeline(ctx context.Context) error {
	p := b.newPipeline("commit", "tx", b.o.Stages*b.o.Parallelism)
	k := float64(len(p.stages))
	r, err := b.pipelineRun(ctx, p, b.o.CommitMessages, true)
	if err != nil {
		return err
	}
	c := p.workers()
	name := fmt.Sprintf("commit pipeline (%d stages × UPDATE + transition, %d workers)", len(p.stages), c)
	rep := b.report
	passes := k * float64(r.messages) / r.elapsed.Seconds()
	rep.add(Figure{Key: "commit.messages", Name: name + ": messages", Value: passes / k, Unit: "msg/s",
		Ceiling: b.ceilingC / k, Of: fmt.Sprintf("commit ceiling at %d connections ÷ %d stages", c, len(p.stages)), Load: r.load})
	f := Figure{Key: "commit.passes", Name: name + ": stage passes", Value: passes, Unit: "passes/s",
		Ceiling: b.ceilingC, Of: fmt.Sprintf("commit ceiling at %d connections", c), Target: fmt.Sprintf("≥ %.2f", targetCommitRatio), Load: r.load}
	if b.ceilingC > 0 {
		f.Met = atLeast(passes/b.ceilingC, targetCommitRatio)
	}
	rep.add(f)
	b.latencyFigures("commit", name, r)
	b.dispatcherFigures("commit", name, r, false)
	b.usageNote("commit pipeline", r)
	return nil
}

// usageNote tells where a pipeline's CPU went, per stage pass.
func (b *bench) usageNote(what string, r runResult) {
	passes := len(b.stages) * r.messages
	b.report.note("%s: per stage pass: dispatcher %.1f µs CPU, %s", what, float64(r.cpu.Microseconds())/float64(passes), r.usage.per(passes))
}

// statusLinePipeline: no-op stages that answer their transition on the
// status line, against the dispatcher's statements alone.
func (b *bench) statusLinePipeline(ctx context.Context) error {
	p := b.newPipeline("status line", "statusline", b.o.Stages*b.o.Parallelism)
	return b.statusLineRun(ctx, "statusline", p, true)
}

// widePipeline is the status-line pipeline with WideWorkers workers.
func (b *bench) widePipeline(ctx context.Context) error {
	p := b.newPipeline("wide", "statusline", b.o.WideWorkers)
	return b.statusLineRun(ctx, "wide", p, false)
}

func (b *bench) statusLineRun(ctx context.Context, key string, p pipeline, load bool) error {
	b.progress("%s: the dispatcher's statements alone (RunTurn, no workers), %v", p.name, b.o.CeilingTime)
	ceiling, err := b.turnCeiling(ctx, p, b.o.Messages, b.o.CeilingTime)
	if err != nil {
		return err
	}
	if err := b.reset(ctx); err != nil {
		return err
	}
	r, err := b.pipelineRun(ctx, p, b.o.Messages, load)
	if err != nil {
		return err
	}
	k := float64(len(p.stages))
	name := fmt.Sprintf("status-line pipeline (%d no-op stages, %d workers)", len(p.stages), p.workers())
	if r.workers != p.workers() {
		name = fmt.Sprintf("status-line pipeline (%d no-op stages, %d of %d workers running)", len(p.stages), r.workers, p.workers())
	}
	passes := k * float64(r.messages) / r.elapsed.Seconds()
	of := fmt.Sprintf("dispatcher statements alone (RunTurn, caps %d)", p.parallelism[0]*p.queueLimit)
	rep := b.report
	if key == "statusline" {
		rep.add(Figure{Key: key + ".messages", Name: name + ": messages", Value: passes / k, Unit: "msg/s",
			Ceiling: ceiling / k, Of: of + " ÷ " + strconv.Itoa(len(p.stages)), Load: r.load})
	}
	rep.add(Figure{Key: key + ".passes", Name: name + ": stage passes", Value: passes, Unit: "passes/s",
		Ceiling: ceiling, Of: of, Target: "≥ 30 000/s", Met: atLeast(passes, targetPasses), Load: r.load})
	if key == "statusline" && b.ceilingC > 0 {
		rep.note("status-line pipeline: %.1f× the commit ceiling at %d connections (%s tx/s): no commit per pass in the stages",
			passes/b.ceilingC, b.o.Stages*b.o.Parallelism, num(b.ceilingC))
	}
	if load {
		b.latencyFigures(key, name, r)
	}
	b.dispatcherFigures(key, name, r, p.workers() >= b.o.WideWorkers)
	b.usageNote(fmt.Sprintf("status-line pipeline, %d workers", p.workers()), r)
	return nil
}

// pipelineRun starts a dispatcher on p, measures its throughput with n
// messages and, if load, the latency under load, and stops it.
func (b *bench) pipelineRun(ctx context.Context, p pipeline, n int, load bool) (runResult, error) {
	if err := b.reset(ctx); err != nil {
		return runResult{}, err
	}
	b.progress("%s: pepsi dispatch with %d workers, %d messages", p.name, p.workers(), n)
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return runResult{}, err
	}
	defer d.stop() //nolint:errcheck // a second stop is harmless
	r, err := b.throughput(ctx, d, p, n)
	if err != nil {
		return r, fmt.Errorf("%s: %w", p.name, err)
	}
	if load {
		rate := b.o.LoadFraction * float64(r.messages) / r.elapsed.Seconds()
		b.progress("%s: feeding %s msg/s for %v", p.name, num(rate), b.o.LoadTime)
		r.p50, r.p99, r.rate, err = b.underLoad(ctx, d, rate, b.o.LoadTime)
		if err != nil {
			return r, fmt.Errorf("%s under load: %w", p.name, err)
		}
	}
	rss, err := d.stop()
	if err != nil {
		return r, fmt.Errorf("%s: %w", p.name, err)
	}
	r.hwm = max(r.hwm, rss)
	return r, nil
}

// latencyFigures adds the enqueue → done latency under load.
func (b *bench) latencyFigures(key, name string, r runResult) {
	k := len(b.stages)
	floor50, floor99 := float64(k)*ms(b.commitP50), float64(k)*ms(b.commitP99)
	at := fmt.Sprintf(" at %s msg/s (%.0f%% of its throughput)", num(r.rate), 100*b.o.LoadFraction)
	b.report.add(Figure{Key: key + ".latency.p50", Name: name + ": enqueue → done p50" + at, Value: ms(r.p50), Unit: "ms",
		Ceiling: floor50, Of: fmt.Sprintf("floor: %d × commit latency p50", k), Load: r.load})
	b.report.add(Figure{Key: key + ".latency.p99", Name: name + ": enqueue → done p99" + at, Value: ms(r.p99), Unit: "ms",
		Ceiling: floor99, Of: fmt.Sprintf("floor: %d × commit latency p99", k), Load: r.load})
}

// dispatcherFigures adds the dispatcher's CPU per pass and peak RSS; the
// RSS target holds for the wide run.
func (b *bench) dispatcherFigures(key, name string, r runResult, wide bool) {
	passes := float64(len(b.stages) * r.messages)
	cpu := float64(r.cpu.Microseconds()) / passes
	b.report.add(Figure{Key: key + ".cpu", Name: name + ": dispatcher CPU per pass", Value: cpu, Unit: "µs",
		Ceiling: targetCPU, Of: "the target (no database ceiling)", Target: "≤ 10 µs", Met: atMost(cpu, targetCPU), Load: r.load})
	rss := float64(r.hwm) / (1 << 20)
	f := Figure{Key: key + ".rss", Name: name + ": dispatcher peak RSS", Value: rss, Unit: "MB",
		Ceiling: targetRSS, Of: "the target (no database ceiling)", Load: r.load}
	if wide {
		f.Target, f.Met = "≤ 40 MB", atMost(rss, targetRSS)
	}
	b.report.add(f)
}

// wake measures the wake latency on an idle system: single messages,
// enqueued one at a time, from the enqueue's commit (acknowledged) to the
// first stage's worker reading the id from its stdin.
func (b *bench) wake(ctx context.Context) error {
	if err := b.reset(ctx); err != nil {
		return err
	}
	p := b.newPipeline("wake", "statusline", b.o.Stages*b.o.Parallelism)
	p.trace = b.path("wake.trace")
	b.progress("wake latency: %d single messages on an idle pipeline", b.o.WakeSamples)
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return err
	}
	defer d.stop()                                    //nolint:errcheck
	if _, err := b.enqueueBatch(ctx, 1); err != nil { // starts a worker per stage
		return err
	}
	if err := b.waitIdle(ctx, d, time.Minute); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	acked := map[int64]time.Time{}
	var first int64
	for i := range b.o.WakeSamples {
		id, err := queue.Enqueue(ctx, conn, b.stages[0], nil, nil)
		if err != nil {
			return err
		}
		acked[id] = time.Now()
		if i == 0 {
			first = id
		}
		time.Sleep(15*time.Millisecond + rand.N(5*time.Millisecond))
	}
	if err := b.waitIdle(ctx, d, time.Minute); err != nil {
		return err
	}
	idle50, idle99, err := b.latencyFrom(ctx, first)
	if err != nil {
		return err
	}
	if _, err := d.stop(); err != nil {
		return err
	}
	read, err := readTrace(p.trace, b.stages[0])
	if err != nil {
		return err
	}
	var lat []time.Duration
	for id, t := range acked {
		r, ok := read[id]
		if !ok {
			return fmt.Errorf("wake latency: message %d was never read by a %s worker", id, b.stages[0])
		}
		lat = append(lat, r.Sub(t))
	}
	q := percentiles(lat, 0.5, 0.99)
	name := fmt.Sprintf("wake latency, idle (enqueue commit → id read on a worker's stdin, %d samples)", len(lat))
	load := loadAvg()
	b.report.add(Figure{Key: "wake.p50", Name: name + ": p50", Value: ms(q[0]), Unit: "ms", Ceiling: ms(b.commitP50),
		Of: "floor: commit latency p50 (the claim is one)", Target: "≤ 2 ms", Met: atMost(ms(q[0]), ms(targetWakeP50)), Load: load})
	b.report.add(Figure{Key: "wake.p99", Name: name + ": p99", Value: ms(q[1]), Unit: "ms", Ceiling: ms(b.commitP99),
		Of: "floor: commit latency p99", Target: "≤ 10 ms", Met: atMost(ms(q[1]), ms(targetWakeP99)), Load: load})
	b.report.note("idle enqueue → done (%d no-op status-line stages): p50 %.2f ms, p99 %.2f ms", len(b.stages), ms(idle50), ms(idle99))
	return nil
}

// readTrace reads a trace file: the time each id was read at stage.
func readTrace(path, stage string) (map[int64]time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[int64]time.Time{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != stage {
			continue
		}
		id, err1 := strconv.ParseInt(f[1], 10, 64)
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		if _, seen := out[id]; !seen {
			out[id] = time.Unix(0, ns)
		}
	}
	return out, nil
}
