package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestSecondDispatcherRefused: the single-dispatcher lock keeps a second
// one from starting, and the error names the holder.
func TestSecondDispatcherRefused(t *testing.T) {
	b := setup(t, fast, "work")
	b.start()
	b.waitFor("dispatcher started", time.Minute, func() bool { return strings.Contains(b.logs.String(), "dispatcher started") })
	d2, err := New(Options{Config: b.cfg, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = d2.Run(context.Background())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pepsi dispatch pid") {
		t.Fatalf("second dispatcher: %v, want ErrLocked naming the holder", err)
	}
	b.checkInvariants()
}

// TestMissingProgram: a PROGRAM that cannot start holds its stage off with
// a cooldown, logged once, without spinning; the messages stay pending.
func TestMissingProgram(t *testing.T) {
	b := setup(t, fast+"\nSPAWN_COOLDOWN = 0.5", "work\nPROGRAM = /nonexistent/stage --flag", "other")
	ids := b.enqueue("work", "x", "y")
	other := b.enqueue("other", "other=finish")
	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.start()
	b.waitFor("other stage done", time.Minute, func() bool { st, _, _ := b.row(other[0]); return st == "done" })
	// Several cooldowns pass while we watch.
	b.waitFor("claims retried after cooldowns", time.Minute, func() bool {
		return b.int64("SELECT claimed FROM pepsi.dispatch_stats") >= 1+2*4
	})
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	t.Logf("CPU while held off: %v", cpu)
	if cpu > 2*time.Second {
		t.Errorf("dispatcher used %v CPU while its stage was held off: spinning?", cpu)
	}
	for _, id := range ids {
		if st, _, _ := b.row(id); st != "pending" && st != "running" {
			t.Errorf("message %d: %s, want still pending", id, st)
		}
	}
	if n := strings.Count(b.logs.String(), "stage held off"); n != 1 {
		t.Errorf("cooldown logged %d times, want once per episode:\n%s", n, b.logs)
	}
	b.checkInvariants()
	if n := b.count("pending"); n != 2 {
		t.Errorf("%d pending after stop, want 2", n)
	}
}

// TestIdleReapAndPacking: a trickle of work uses one worker, not
// PARALLELISM of them, and idle workers are stopped down to zero.
func TestIdleReapAndPacking(t *testing.T) {
	b := setup(t, "WORKER_IDLE_TIMEOUT = 0.5\nSHUTDOWN_GRACE = 5", "work\nPARALLELISM = 4\nQUEUE_LIMIT = 4")
	b.start()
	b.enqueue("work", "work=slow:50ms", "work=slow:50ms", "work=slow:50ms")
	b.waitSettled(time.Minute)
	if n := b.int64("SELECT count(*) FROM test_workers"); n != 1 {
		t.Errorf("%d workers started for 3 messages with QUEUE_LIMIT 4, want 1", n)
	}
	b.waitFor("idle worker stopped", time.Minute, func() bool {
		return strings.Contains(b.logs.String(), "stopping idle worker") && strings.Contains(b.logs.String(), "worker exited")
	})
	b.enqueue("work", "work=finish")
	b.waitSettled(time.Minute)
	if n := b.int64("SELECT count(*) FROM test_workers"); n != 2 {
		t.Errorf("%d workers started, want 2 (the second after the first was reaped)", n)
	}
	b.checkInvariants()
}

// TestMaxMessages: a worker is recycled after MAX_MESSAGES, and the claim
// never takes more than the workers can still be handed (MAX_MESSAGES
// below QUEUE_LIMIT here).
func TestMaxMessages(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 1\nQUEUE_LIMIT = 4\nMAX_MESSAGES = 2")
	payloads := make([]string, 6)
	for i := range payloads {
		payloads[i] = "work=finish"
	}
	b.enqueue("work", payloads...)
	b.start()
	b.waitSettled(time.Minute)
	if n := b.int64("SELECT count(*) FROM test_workers"); n != 3 {
		t.Errorf("%d workers for 6 messages with MAX_MESSAGES 2, want 3", n)
	}
	if n := b.int64("SELECT max(c) FROM (SELECT count(*) AS c FROM test_passes GROUP BY pid) x"); n != 2 {
		t.Errorf("a worker served %d messages, want at most 2", n)
	}
	b.checkInvariants()
	if n := b.int64("SELECT reset FROM pepsi.dispatch_stats"); n != 0 {
		t.Errorf("%d claimed messages put back unrun, want 0", n)
	}
}

// TestPausedComesBack: a paused message is resumed when due and finishes.
func TestPausedComesBack(t *testing.T) {
	b := setup(t, fast, "work")
	ids := b.enqueue("work", "work=pauseonce:1s")
	b.start()
	b.waitFor("paused", time.Minute, func() bool { st, _, _ := b.row(ids[0]); return st == "paused" })
	b.waitSettled(time.Minute)
	if st, _, _ := b.row(ids[0]); st != "done" {
		t.Errorf("status %s, want done", st)
	}
	b.checkInvariants()
	if n := b.int64("SELECT resumed FROM pepsi.dispatch_stats"); n != 1 {
		t.Errorf("resumed = %d, want 1", n)
	}
	if n := b.int64("SELECT paused FROM pepsi.dispatch_stats"); n != 1 {
		t.Errorf("paused = %d, want 1", n)
	}
}

// TestWorkerEnvironment: PROGRAM gets -c CONFIG_FILE and PEPSI_* in its
// environment; its stderr is relayed with stage and pid; fused stages are
// booked to their own statistics.
func TestWorkerEnvironment(t *testing.T) {
	b := setup(t, fast, "work\nPROGRAM = "+testkit.Worker(t)+" --flag")
	b.enqueue("work", "work=fused:extra")
	b.start()
	b.waitSettled(time.Minute)
	b.checkInvariants()
	var args, conf string
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT args, config FROM test_workers").Scan(&args, &conf); err != nil {
		t.Fatal(err)
	}
	if want := "--flag -c " + b.cfg.Dispatch.ConfigFile; args != want || conf != b.cfg.Dispatch.ConfigFile {
		t.Errorf("args %q config %q, want %q and %q", args, conf, want, b.cfg.Dispatch.ConfigFile)
	}
	if !strings.Contains(b.logs.String(), `msg="worker: testworker ready" stage=work pid=`) {
		t.Errorf("stderr not relayed with stage and pid:\n%s", b.logs)
	}
	if n := b.int64("SELECT processed FROM pepsi.stage_stats WHERE stage = 'extra'"); n != 1 {
		t.Errorf("fused stage processed = %d, want 1", n)
	}
	if n := b.int64("SELECT stage_passes FROM pepsi.dispatch_stats"); n != 2 {
		t.Errorf("stage_passes = %d, want 2", n)
	}
}

// TestStopUnderLoad: stopping with messages in flight puts them back, and a
// restarted dispatcher finishes everything.
func TestStopUnderLoad(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 2\nQUEUE_LIMIT = 4", "next\nPARALLELISM = 2")
	payloads := make([]string, 200)
	for i := range payloads {
		payloads[i] = "work=slow:20ms next=finish"
		if i%2 == 0 {
			payloads[i] = "work=advance:next next=slow:10ms"
		}
	}
	b.enqueue("work", payloads...)
	b.start()
	b.waitFor("some done", time.Minute, func() bool { return b.count("done") >= 20 })
	b.checkInvariants()
	if b.count("done") == 200 {
		t.Fatal("everything finished before the stop; the test proves nothing")
	}
	b.start()
	b.waitSettled(2 * time.Minute)
	b.checkInvariants()
	if n := b.count("done"); n != 200 {
		t.Errorf("%d done, want 200", n)
	}
	if n := b.int64("SELECT orphans FROM pepsi.dispatch_stats"); n != 0 {
		t.Errorf("orphans = %d after a clean stop, want 0", n)
	}
}

// TestOrphansReset: rows left running by a dispatcher that died are reset
// at start and then processed.
func TestOrphansReset(t *testing.T) {
	b := setup(t, fast, "work")
	ids := b.enqueue("work", "work=finish", "work=finish")
	if _, err := b.db.Pool.Exec(context.Background(), "UPDATE pepsi.state SET status = 'running'"); err != nil {
		t.Fatal(err)
	}
	b.start()
	b.waitSettled(time.Minute)
	b.checkInvariants()
	if n := b.int64("SELECT orphans FROM pepsi.dispatch_stats"); n != int64(len(ids)) {
		t.Errorf("orphans = %d, want %d", n, len(ids))
	}
}
