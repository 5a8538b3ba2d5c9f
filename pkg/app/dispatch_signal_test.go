package app

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestDispatchSigquit: SIGQUIT under load stops the dispatcher as SIGTERM
// does (exit 0, nothing left running, the statistics equal to the rows),
// where Go's default was a goroutine dump, exit 2 and messages left
// running until the next start.
func TestDispatchSigquit(t *testing.T) {
	f := newFaultDB(t, "")
	const total = 300
	f.enqueue(total, pipeline("5ms"))
	a := startDispatch(t, "dispatcher")
	testkit.Wait(t, "a fifth done", time.Minute, func() bool { return f.Count("done") >= total/5 }, a.logs)
	if code := a.signal(syscall.SIGQUIT); code != 0 {
		t.Errorf("SIGQUIT: exit %d, want 0", code)
	}
	if f.Count("done") == total {
		t.Fatal("everything finished before SIGQUIT: the test proves nothing")
	}
	logs := a.logs.String()
	if !strings.Contains(logs, "stopping: signal received") || !strings.Contains(logs, "dispatcher stopped") || strings.Contains(logs, "goroutine ") {
		t.Errorf("want a clean stop in the log, and no goroutine dump:\n%s", logs)
	}
	f.Check() // nothing left running, the statistics equal to the rows
}
