package dispatch

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// setsidStage writes a stage program, a shell script that runs pre, then
// starts a process in a session of its own which keeps the script's stdout
// and stderr open for ten minutes (out of reach of the kill of the
// worker's process group), waits until it is in that session, then runs
// body. started counts the scripts that got that far. The test's end
// kills those processes.
func setsidStage(t *testing.T, pre, body string) (script string, started func() int) {
	t.Helper()
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	ready := filepath.Join(dir, "ready.$$") // $$: the script's pid
	script = filepath.Join(dir, "stage.sh")
	src := "#!/bin/sh\n" + pre + "\n" +
		"setsid sh -c \"echo \\$\\$ >> " + pids + "; : > " + ready + "; exec sleep 600\" &\n" +
		"while [ ! -e " + ready + " ]; do sleep 0.01; done\n" +
		": > " + filepath.Join(dir, "started.$$") + "\n" +
		body + "\n"
	if err := os.WriteFile(script, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	started = func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "started.*"))
		return len(m)
	}
	t.Cleanup(func() {
		data, err := os.ReadFile(pids)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(err)
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return script, started
}

// setsidWait is how long the setsid tests wait for what a worker's exit
// brings about: far less than their MAX_RUNTIME, so that only the exit,
// not a timeout, can have done it.
const setsidWait = time.Minute

// setsidConf is their [pepsi-dispatch]: a MAX_RUNTIME far beyond setsidWait.
const setsidConf = "POLL_INTERVAL = 30\nSTATS_INTERVAL = 60\nWORKER_IDLE_TIMEOUT = 30\n" +
	"SHUTDOWN_GRACE = 2\nMAX_RUNTIME = 300\nSPAWN_COOLDOWN = 0.1"

// heldLine is what the dispatcher logs of a worker that exited while a
// process it left behind holds its output open.
const heldLine = "worker exited; a process it left behind holds its stdout or stderr open"

// TestSetsidChildCrash: a worker that exits with messages outstanding
// while a process it started in a session of its own keeps its stdout
// open has crashed, and is seen to at once: each message fails as a
// crash, not as a timeout at MAX_RUNTIME.
func TestSetsidChildCrash(t *testing.T) {
	script, _ := setsidStage(t, "", "read id\nexit 3")
	b := setup(t, setsidConf, "work\nPROGRAM = "+script+"\nPARALLELISM = 1\nQUEUE_LIMIT = 2")
	ids := b.enqueue("work", "a", "b")
	b.start()
	b.waitFor("both messages failed", setsidWait, func() bool { return b.count("failed") == 2 })
	for _, id := range ids {
		if st, _, derr := b.row(id); st != "failed" || derr != "worker crashed: exit status 3" {
			t.Errorf("message %d: %s %q, want failed by the crash", id, st, derr)
		}
	}
	b.waitLog(heldLine, 1, time.Second)
	b.checkInvariants()
	if n := b.int64("SELECT sum(crashes) FROM pepsi.stage_stats"); n != 2 {
		t.Errorf("stage_stats.crashes = %d, want 2", n)
	}
	if n := b.int64("SELECT sum(timeouts) FROM pepsi.stage_stats"); n != 0 {
		t.Errorf("stage_stats.timeouts = %d, want 0", n)
	}
}

// TestSetsidChildAnswered: a worker that answers and exits while such a
// process holds its stdout is removed at once, and the next message goes
// to a new worker.
func TestSetsidChildAnswered(t *testing.T) {
	script, _ := setsidStage(t, "", "read id\necho '0 done'\nexit 0")
	b := setup(t, setsidConf, "work\nPROGRAM = "+script+"\nPARALLELISM = 1\nQUEUE_LIMIT = 1")
	first := b.enqueue("work", "a")
	b.start()
	b.waitFor("the first message done", setsidWait, func() bool { st, _, _ := b.row(first[0]); return st == "done" })
	// Handed to the first worker, the second message would wait for
	// MAX_RUNTIME: it is enqueued once that worker is known to be gone.
	b.waitLog("worker exited unasked", 1, setsidWait)
	second := b.enqueue("work", "b")
	b.waitFor("the second message done", setsidWait, func() bool { st, _, _ := b.row(second[0]); return st == "done" })
	b.waitLog(heldLine, 2, setsidWait)
	b.checkInvariants()
}

// TestSetsidChildStop: SIGTERM while such workers hold messages. A worker
// that exits on SIGTERM, and one that ignores it and is killed at
// SHUTDOWN_GRACE, are both seen to exit; their messages go back to
// pending, nothing is left running, and the dispatcher returns within
// SHUTDOWN_GRACE and stopSlack without blaming the database.
func TestSetsidChildStop(t *testing.T) {
	for _, tc := range []struct{ name, pre, body string }{
		{"exits", "", "exec " + testkit.Worker(t) + " \"$@\""},
		{"ignores", "trap '' TERM", "read id\nexec sleep 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script, started := setsidStage(t, tc.pre, tc.body)
			b := setup(t, setsidConf, "work\nPROGRAM = "+script+"\nPARALLELISM = 2\nQUEUE_LIMIT = 1")
			ids := b.enqueue("work", "work=hang", "work=hang")
			b.start()
			b.waitFor("both messages handed out", setsidWait, func() bool { return b.count("running") == 2 })
			b.waitFor("both workers past setsid", setsidWait, func() bool { return started() == 2 })
			b.cancel()
			b.cancel = nil
			// The bound is SHUTDOWN_GRACE plus stopSlack; the slack on top
			// is for a loaded machine, and far below the ten minutes the
			// setsid processes hold the pipes.
			limit := b.cfg.Dispatch.ShutdownGrace + stopSlack + 30*time.Second
			select {
			case err := <-b.done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(limit):
				t.Fatalf("the dispatcher did not return within %s of SIGTERM; logs:\n%s", limit, b.logs)
			}
			logs := b.logs.String()
			if strings.Count(logs, heldLine) != 2 || !strings.Contains(logs, "dispatcher stopped") || strings.Contains(logs, "giving up") {
				t.Errorf("want two lines %q, \"dispatcher stopped\" and no \"giving up\"; logs:\n%s", heldLine, logs)
			}
			for _, id := range ids {
				if st, _, derr := b.row(id); st != "pending" || derr != "" {
					t.Errorf("message %d: %s %q, want pending again", id, st, derr)
				}
			}
			b.checkInvariants()
		})
	}
}

// TestStopWorkerLeft: a worker whose process has not exited by stopBy
// (unkillable: SIGKILL was sent at SHUTDOWN_GRACE) does not hold up the
// stop; the log says the workers were not seen to exit, and does not blame
// the database.
func TestStopWorkerLeft(t *testing.T) {
	u := newUnit(t)
	u.worker("a", 1, 2)
	u.beginStop()
	u.watch(u.at.Add(u.cfg.Dispatch.ShutdownGrace))
	if u.stopped(u.stopBy.Add(-time.Millisecond)) || !u.stopped(u.stopBy) {
		t.Error("not given up on exactly at stopBy")
	}
	u.result(nil)
	logs := u.log.String()
	if !strings.Contains(logs, `"giving up: workers did not exit after SIGKILL; their messages stay running until the next start resets them" workers=1 count=2`) ||
		strings.Contains(logs, "database") {
		t.Errorf("log: %s", logs)
	}
}
