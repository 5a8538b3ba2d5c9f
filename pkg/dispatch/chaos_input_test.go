package dispatch

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBadPrograms: a PROGRAM that is a directory, a file that is not
// executable, a script whose interpreter does not exist, and a program
// that exits at once. None stops the dispatcher or makes it spin; each
// stage is held off (logged once per episode) while a good stage works;
// the messages of a stage that cannot start stay pending; those handed to
// a program that died fail with the reason.
func TestBadPrograms(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	badinterp := filepath.Join(dir, "badinterp")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badinterp, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := setup(t, fast+"\nSPAWN_COOLDOWN = 0.3",
		"dir\nPROGRAM = "+dir,
		"noexec\nPROGRAM = "+noexec,
		"badinterp\nPROGRAM = "+badinterp,
		"exits\nPROGRAM = /bin/true",
		"good")
	f := newFaults(b)
	b.enqueue("dir", "a", "b")
	b.enqueue("noexec", "a", "b")
	b.enqueue("badinterp", "a", "b")
	exits := b.enqueue("exits", "a", "b", "c")
	good := b.enqueue("good", "good=finish", "good=finish")
	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	b.start()
	b.waitFor("the good stage done", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.state WHERE id = ANY($1) AND status = 'done'", good) == 2
	})
	// Several cooldowns pass: the stages that cannot start are tried again.
	b.waitFor("held-off stages retried", time.Minute, func() bool {
		return b.int64("SELECT claimed FROM pepsi.dispatch_stats") >= 2+3*6
	})
	b.waitFor("the messages of the program that exits failed", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.state WHERE id = ANY($1) AND status = 'failed'", exits) == 3
	})
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	t.Logf("CPU: %v", cpu)
	if cpu > 5*time.Second {
		t.Errorf("dispatcher used %v CPU with stages held off: spinning?", cpu)
	}
	b.checkInvariants()
	logs := b.logs.String()
	for stage, reason := range map[string]string{
		"dir":       "permission denied",
		"noexec":    "permission denied",
		"badinterp": "no such file or directory",
		"exits":     "worker died before its first answer",
	} {
		var lines []string
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, `msg="stage held off" stage=`+stage+" ") {
				lines = append(lines, l)
			}
		}
		if stage == "exits" {
			// Each start succeeds (the episode ends) and the program dies
			// before its first answer (a new one begins): one line per
			// cooldown at most.
			if len(lines) < 1 || len(lines) > 1+int(time.Since(start)/(300*time.Millisecond)) || !strings.Contains(lines[0], reason) {
				t.Errorf("stage %s: held off %d times in %v, for %q:\n%s", stage, len(lines), time.Since(start), reason, strings.Join(lines, "\n"))
			}
			continue
		}
		if len(lines) != 1 || !strings.Contains(lines[0], reason) {
			t.Errorf("stage %s: held off %d times in the log, want once, for %q:\n%s", stage, len(lines), reason, strings.Join(lines, "\n"))
		}
		if n := b.int64("SELECT count(*) FROM pepsi.state WHERE stage = $1 AND status = 'pending'", stage); n != 2 {
			t.Errorf("stage %s: %d pending, want 2", stage, n)
		}
	}
	for id, reason := range b.failures() {
		if !strings.HasPrefix(reason, "worker crashed: exit status 0") {
			t.Errorf("message %d failed: %q", id, reason)
		}
	}
	f.log()
}
