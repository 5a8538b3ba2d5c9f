package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// maxMessages is MAX_MESSAGES in the benchmark's pipelines: high, so that
// recycling workers (a process start and a connection each) does not
// count against the dispatcher.
const maxMessages = 1_000_000

// pipeline is one configuration of stages.
type pipeline struct {
	name          string
	mode          string // "tx" or "statusline": the stage program's --mode
	stages        []string
	parallelism   []int // per stage
	queueLimit    int
	trace         string // the stages' trace file (TraceEnv), or ""
	rate          string // the first stage's RATE, or ""
	keys          int    // messages get a header customer of this many values (0: no headers)
	keyed         bool   // every stage has KEY = header:customer
	keyLimit      int    // KEY_LIMIT of the keyed stages (0: the default, 1)
	keyFirst      bool   // only the first stage has KEY
	apart         bool   // each stage finishes its messages: no stage advances to the next
	retention     string // RETENTION, or "" for the default
	statsInterval string // STATS_INTERVAL, or "" for 60
	tracing       bool   // TRACING = on (the OTEL_* environment points at the bench's sink)
}

// workers is how many workers the pipeline may run.
func (p pipeline) workers() int {
	n := 0
	for _, w := range p.parallelism {
		n += w
	}
	return n
}

// newPipeline spreads workers over the bench's stages as evenly as it can.
func (b *bench) newPipeline(name, mode string, workers int) pipeline {
	p := pipeline{name: name, mode: mode, stages: b.stages, queueLimit: b.o.QueueLimit}
	k := len(b.stages)
	for i := range k {
		w := workers / k
		if i < workers%k {
			w++
		}
		p.parallelism = append(p.parallelism, max(w, 1))
	}
	return p
}

// conf writes the pipeline's pepsi.conf. The DSN is not in it: children
// get PEPSI_DSN.
func (b *bench) conf(p pipeline) (string, error) {
	var c strings.Builder
	stats := p.statsInterval
	if stats == "" {
		stats = "60"
	}
	fmt.Fprintf(&c, "; written by pepsi bench\n[pepsi-dispatch]\nPOLL_INTERVAL = 30\nSTATS_INTERVAL = %s\n", stats)
	c.WriteString("WORKER_IDLE_TIMEOUT = 600\nSHUTDOWN_GRACE = 5\nORPHAN_SWEEP = 600\n")
	if p.retention != "" {
		fmt.Fprintf(&c, "RETENTION = %s\n", p.retention)
	}
	if p.tracing {
		c.WriteString("TRACING = on\n")
	}
	for i, s := range p.stages {
		prog := shellQuote(b.o.StageExe) + " stage --mode " + p.mode
		if i+1 < len(p.stages) && !p.apart {
			prog += " --next " + p.stages[i+1]
		}
		fmt.Fprintf(&c, "\n[stage-%s]\nPROGRAM = %s\nPARALLELISM = %d\nQUEUE_LIMIT = %d\nMAX_MESSAGES = %d\n",
			s, prog, p.parallelism[i], p.queueLimit, maxMessages)
		if i == 0 && p.rate != "" {
			fmt.Fprintf(&c, "RATE = %s\n", p.rate)
		}
		if p.keyed && (i == 0 || !p.keyFirst) {
			c.WriteString("KEY = header:customer\n")
			if p.keyLimit > 1 {
				fmt.Fprintf(&c, "KEY_LIMIT = %d\n", p.keyLimit)
			}
		}
	}
	path := b.path(strings.ReplaceAll(p.name, " ", "-") + ".conf")
	return path, os.WriteFile(path, []byte(c.String()), 0o644)
}

// shellQuote quotes a word for PROGRAM (POSIX shell word rules).
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// env is the environment of the children: the benchmark database, the
// configuration, the trace file.
func (b *bench) env(conf, trace string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "PEPSI_DSN" && k != "PEPSI_CONFIG" && k != TraceEnv {
			env = append(env, kv)
		}
	}
	env = append(env, "PEPSI_DSN="+b.dsn, "PEPSI_CONFIG="+conf)
	if trace != "" {
		env = append(env, TraceEnv+"="+trace)
	}
	return env
}

// dispatchProc is a "pepsi dispatch" child process.
type dispatchProc struct {
	cmd  *exec.Cmd
	pid  int
	log  string
	done chan struct{}
	err  error
}

// startDispatcher starts "pepsi dispatch" on the pipeline and waits until
// it has taken the lock and listens.
func (b *bench) startDispatcher(ctx context.Context, p pipeline) (*dispatchProc, error) {
	conf, err := b.conf(p)
	if err != nil {
		return nil, err
	}
	d := &dispatchProc{log: b.path(strings.ReplaceAll(p.name, " ", "-") + ".log"), done: make(chan struct{})}
	logf, err := os.Create(d.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(b.o.Exe, "dispatch", "-c", conf)
	d.cmd.Env = b.env(conf, p.trace)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pepsi dispatch: %w", err)
	}
	d.pid = d.cmd.Process.Pid
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		data, _ := os.ReadFile(d.log)
		if bytes.Contains(data, []byte("dispatcher started")) {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("pepsi dispatch exited at start (%v):\n%s", d.err, tail(data))
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("pepsi dispatch did not start within a minute:\n%s", tail(data))
		}
	}
}

// alive returns an error if the dispatcher has exited.
func (d *dispatchProc) alive() error {
	select {
	case <-d.done:
		data, _ := os.ReadFile(d.log)
		return fmt.Errorf("pepsi dispatch exited (%v):\n%s", d.err, tail(data))
	default:
		return nil
	}
}

// stop sends SIGTERM, waits, and returns the peak RSS the kernel recorded
// for the process (wait4's ru_maxrss), in bytes.
func (d *dispatchProc) stop() (int64, error) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.done
		return 0, errors.New("pepsi dispatch did not stop within a minute of SIGTERM")
	}
	var rss int64
	if ru, ok := d.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss << 10
	}
	if d.err != nil {
		data, _ := os.ReadFile(d.log)
		return rss, fmt.Errorf("pepsi dispatch: %v:\n%s", d.err, tail(data))
	}
	if data, _ := os.ReadFile(d.log); bytes.Contains(data, []byte("level=ERROR")) {
		return rss, fmt.Errorf("pepsi dispatch logged errors:\n%s", tail(data))
	}
	return rss, nil
}

// tail returns the last lines of a log.
func tail(data []byte) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// enqueueBatch enqueues n messages at the first stage in one transaction
// and returns the first id (they are consecutive: nothing else enqueues).
func (b *bench) enqueueBatch(ctx context.Context, n int) (int64, error) {
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = []byte("bench")
	}
	ids, err := b.db.EnqueueBulk(ctx, queue.Bulk{Stage: b.stages[0], Payloads: payloads})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// feed enqueues n messages for p at its first stage and returns the
// first id: by COPY, or, when p has keys, with their header.
func (b *bench) feed(ctx context.Context, p pipeline, n int) (int64, error) {
	if p.keys == 0 {
		return b.enqueueBatch(ctx, n)
	}
	return b.enqueueWithKeys(ctx, n, p.keys, b.stages[0])
}

// waitIdle waits until every message is done or failed.
func (b *bench) waitIdle(ctx context.Context, d *dispatchProc, timeout time.Duration) error {
	return d.waitFor(ctx, "messages not done", timeout, b.idle)
}

// waitFor waits until cond holds, checking after 20 ms and then ever less
// often, up to every 200 ms; it fails when the dispatcher exits or, saying
// what is not so, after timeout. The checks cost the server CPU that the
// run under measurement would otherwise have (b.idle walked the partial
// indexes past every row claimed since the last vacuum: 2.3 ms a check,
// every 20 ms a tenth of a core), and no figure depends on when a check
// sees the end: the elapsed time is the database's, from the messages'
// own timestamps.
func (d *dispatchProc) waitFor(ctx context.Context, what string, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	pause := 20 * time.Millisecond
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := d.alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(d.log)
			return fmt.Errorf("%s after %v:\n%s", what, timeout, tail(data))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// checkDone fails unless every message from id first on is done.
func (b *bench) checkDone(ctx context.Context, first int64) error {
	notDone, sample, err := b.notDoneFrom(ctx, first)
	if err != nil {
		return err
	}
	if notDone > 0 {
		return fmt.Errorf("%d messages not done, e.g. %s", notDone, sample)
	}
	return nil
}

// runResult is what a throughput run measured.
type runResult struct {
	messages int
	elapsed  time.Duration // first message created → last one done, by the database's clock
	cpu      time.Duration // the dispatcher's CPU meanwhile
	hwm      int64         // the dispatcher's peak RSS
	workers  int           // worker processes running at the end
	load     float64
	usage    usage // what the throughput window cost

	p50, p99 time.Duration // enqueue → done under load
	rate     float64       // the feed rate reached, messages/s
}

// throughput warms the pipeline up (every worker started), then sends n
// messages through it in one batch and measures. The batch starts just
// after a checkpoint: one that the WAL of a step before (in bench/peers,
// River's run) would bring on does not fall into it, and every run writes
// the same full-page images.
func (b *bench) throughput(ctx context.Context, d *dispatchProc, p pipeline, n int) (runResult, error) {
	r := runResult{messages: n}
	if _, err := b.feed(ctx, p, p.workers()*p.queueLimit); err != nil {
		return r, err
	}
	if err := b.waitIdle(ctx, d, 5*time.Minute); err != nil {
		return r, err
	}
	if _, err := b.sql.Exec(ctx, "CHECKPOINT"); err != nil {
		return r, fmt.Errorf("checkpoint before the run: %w", err)
	}
	cpu0, err := procCPU(d.pid)
	if err != nil {
		return r, err
	}
	s0, err := b.sample(ctx, d.pid)
	if err != nil {
		return r, err
	}
	first, err := b.feed(ctx, p, n)
	if err != nil {
		return r, err
	}
	if err := b.waitIdle(ctx, d, 10*time.Minute); err != nil {
		return r, err
	}
	cpu1, err := procCPU(d.pid)
	if err != nil {
		return r, err
	}
	s1, err := b.sample(ctx, d.pid)
	if err != nil {
		return r, err
	}
	r.usage = s1.since(s0)
	r.cpu, r.load, r.workers = cpu1-cpu0, loadAvg(), len(children(d.pid))
	if r.hwm, err = procHWM(d.pid); err != nil {
		return r, err
	}
	if err := b.checkDone(ctx, first); err != nil {
		return r, err
	}
	r.elapsed, err = b.spanFrom(ctx, first)
	return r, err
}

// underLoad feeds messages at rate per second for dur, in a small batch
// every 10 ms, waits until they are done, and returns the enqueue → done
// latency's p50 and p99 (message created_at to the done transition's
// updated_at, both the database's clock) and the rate it reached.
func (b *bench) underLoad(ctx context.Context, d *dispatchProc, rate float64, dur time.Duration) (p50, p99 time.Duration, got float64, err error) {
	var first int64
	sent := 0
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < dur {
		select {
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		case <-tick.C:
		}
		want := int(rate*time.Since(start).Seconds()) - sent
		if want <= 0 {
			continue
		}
		id, err := b.enqueueBatch(ctx, want)
		if err != nil {
			return 0, 0, 0, err
		}
		if first == 0 {
			first = id
		}
		sent += want
	}
	got = float64(sent) / time.Since(start).Seconds()
	if err := b.waitIdle(ctx, d, 10*time.Minute); err != nil {
		return 0, 0, 0, err
	}
	if err := b.checkDone(ctx, first); err != nil {
		return 0, 0, 0, err
	}
	p50, p99, err = b.latencyFrom(ctx, first)
	return p50, p99, got, err
}

// snapshot is what the machine and the server have used so far.
type snapshot struct {
	workers, backends map[int]time.Duration
	checkpoints       int64
}

// usage is what a measurement cost, beyond the dispatcher's own CPU.
type usage struct {
	workers, backends time.Duration // CPU of the stage programs, of the database's backends
	// checkpoints the server made meanwhile, for any database: each one
	// makes the next write of every page log a full-page image (DROP
	// DATABASE, which test suites do often, requests one).
	checkpoints int64
}

// sample takes a snapshot: the CPU of the dispatcher's children (pid 0:
// none) and of the benchmark database's backends, the server's checkpoints.
func (b *bench) sample(ctx context.Context, pid int) (snapshot, error) {
	var s snapshot
	if pid != 0 {
		s.workers = cpuOf(children(pid))
	}
	pids, err := b.backendPIDs(ctx)
	if err != nil {
		return s, err
	}
	s.backends = cpuOf(pids)
	s.checkpoints, err = b.checkpoints(ctx)
	return s, err
}

func (s snapshot) since(then snapshot) usage {
	return usage{workers: cpuSince(then.workers, s.workers), backends: cpuSince(then.backends, s.backends),
		checkpoints: s.checkpoints - then.checkpoints}
}
