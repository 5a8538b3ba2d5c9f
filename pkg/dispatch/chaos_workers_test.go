package dispatch

import (
	"strings"
	"testing"
	"time"
)

// TestChaosWorkers runs a three-stage pipeline while its workers hang,
// print garbage, crash and are killed with SIGKILL from outside. Afterwards
// every message is done or failed; each failure is the one its payload
// asked for, or a kill of the worker that had it; no pass ran twice; the
// statistics agree with the rows.
func TestChaosWorkers(t *testing.T) {
	// MAX_RUNTIME is long enough that a loaded machine does not time out a
	// healthy message; few messages hang, as each costs a worker that long.
	b := setup(t, chaosWith("MAX_RUNTIME = 4"),
		chaosStages(chaosRetries, "", chaosRetries)...)
	f := newFaults(b)
	const total = 240
	payloads := make([]string, total)
	want := make(map[int]string) // index → the failure it must end with
	for i := range payloads {
		switch i % 80 {
		case 3:
			payloads[i] = through("1ms", "enrich=hang")
			want[i] = "timeout: no answer within MAX_RUNTIME"
		case 9, 49:
			payloads[i] = through("1ms", "enrich=garbage")
			want[i] = "protocol error: status line does not start with a decimal code"
		case 15, 55:
			payloads[i] = through("1ms", "enrich=exit:5")
			want[i] = "stage enrich answered 5: failing on purpose"
		case 21:
			payloads[i] = through("1ms", "parse=hangonce:enrich")
		case 27, 67:
			payloads[i] = through("1ms", "deliver=garbageonce")
		case 33, 73:
			payloads[i] = through("1ms", "parse=crashonce:enrich", "deliver=crashonce")
		default:
			payloads[i] = through("3ms")
		}
	}
	ids := b.enqueue("parse", payloads...)
	b.start()
	b.waitCount("a tenth done", 2*time.Minute, total/10, "SELECT count(*) FROM pepsi.state WHERE status = 'done'")
	// Kill a worker every 150 ms, nine times, while the pipeline runs.
	for k := 0; k < 9; k++ {
		stage := []string{"parse", "enrich", "deliver"}[k%3]
		b.waitFor("a live worker to kill", time.Minute, func() bool { return len(b.liveWorkers("")) > 0 })
		f.mark("worker kill -9")
		if b.killWorker(stage) == 0 {
			b.killWorker("")
		}
		f.after()
		time.Sleep(150 * time.Millisecond)
	}
	if b.count("done") == total {
		t.Fatal("everything finished before the faults: the test proves nothing")
	}
	b.waitSettled(3 * time.Minute)
	f.log()
	b.checkExplained()
	failed := b.failures()
	for i, id := range ids {
		reason, isFailed := failed[id]
		killed := isFailed && f.inflight[id] && strings.Contains(reason, "worker crashed: signal: killed")
		switch {
		case want[i] != "":
			if !isFailed || !(strings.Contains(reason, want[i]) || killed) {
				st, _, _ := b.row(id)
				t.Errorf("message %d (%s): %s %q, want failed with %q", id, payloads[i], st, reason, want[i])
			}
		case isFailed && !killed:
			t.Errorf("message %d (%s) failed: %q, and was not in flight at a kill", id, payloads[i], reason)
		}
	}
	f.checkDuplicates(true)
	b.checkInvariants()
	if n := b.int64("SELECT sum(crashes) FROM pepsi.stage_stats"); n < 1 {
		t.Errorf("stage_stats.crashes = %d: no crash counted", n)
	}
	// A timeout for each hang that failed as one. A hang, or a hangonce,
	// may instead have been ended by a kill -9 from outside, which counts
	// as a crash: which of them the kills hit is up to timing.
	hung := b.int64("SELECT count(*) FROM pepsi.state WHERE status = 'failed' AND dispatch_error LIKE 'timeout%'")
	if n := b.int64("SELECT sum(timeouts) FROM pepsi.stage_stats"); n < hung {
		t.Errorf("stage_stats.timeouts = %d, want at least the %d messages that failed by timeout", n, hung)
	}
}
