package dispatch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestProgramOnPath: a PROGRAM that is not absolute is found on PATH.
func TestProgramOnPath(t *testing.T) {
	t.Setenv("PATH", filepath.Dir(testkit.Worker(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	b := setup(t, fast, "work\nPROGRAM = "+testkit.WorkerName)
	ids := b.enqueue("work", "work=finish")
	b.start()
	b.waitSettled(time.Minute)
	if st, _, _ := b.row(ids[0]); st != "done" {
		t.Errorf("status %s, want done", st)
	}
	b.checkInvariants()
}

// TestProcessGroupKilled: what a stage program starts dies with it when the
// dispatcher kills it.
func TestProcessGroupKilled(t *testing.T) {
	marker := "317.25" // an unusual sleep length to find the process by
	script := filepath.Join(t.TempDir(), "stage.sh")
	body := "#!/bin/sh\nsleep " + marker + " &\nexec " + testkit.Worker(t) + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	b := setup(t, fast+"\nMAX_RUNTIME = 4", "work\nPROGRAM = "+script)
	ids := b.enqueue("work", "work=hang")
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "failed" || !strings.HasPrefix(derr, "timeout") {
		t.Errorf("status %s %q, want failed by timeout", st, derr)
	}
	b.waitFor("the stage's child gone", time.Minute, func() bool {
		out, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output()
		return len(strings.TrimSpace(string(out))) == 0
	})
	b.checkInvariants()
}

// TestStatsFlushedWhenIdle: the statistics of a finished burst are written
// when the pipeline goes idle, not at the next STATS_INTERVAL.
func TestStatsFlushedWhenIdle(t *testing.T) {
	b := setup(t, "STATS_INTERVAL = 1h\nWORKER_IDLE_TIMEOUT = 1h", "work")
	b.enqueue("work", "work=finish", "work=finish", "work=exit:2")
	b.start()
	b.waitFor("stats written while running", time.Minute, func() bool {
		return b.int64("SELECT coalesce(sum(processed + failed), 0) FROM pepsi.stage_stats") == 3 &&
			b.int64("SELECT done + failed FROM pepsi.dispatch_stats") == 3
	})
	b.checkInvariants()
}
