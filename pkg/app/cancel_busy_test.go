package app

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestDispatchCancelBusy: cancel --force of a message whose stage locks
// its row for the whole pass (as pkg/worker and README's Python stage do)
// answers at once, while the pass goes on: nothing cancelled, exit 1, and
// a line naming the message as busy. The pass then ends as the stage
// decides (done), and every message is in one state.
func TestDispatchCancelBusy(t *testing.T) {
	s := ctlSite(t, "", "work")
	d := startDispatch(t, "dispatcher")
	d.waitLog("dispatcher started", 1)
	run := enqueueCLI(t, "work=lockfinish", "--stage", "work")[0]
	release := blockPass(s, run, "work")
	waitBlocked(s, d.logs)

	// The pass holds the row until release: a cancel that waited for it
	// would not answer before the deadline, which is there only so that
	// such a cancel fails the test instead of hanging it.
	answered := make(chan result, 1)
	go func() { answered <- pepsi(t, "", "queue", "cancel", "--force", strconv.FormatInt(run, 10)) }()
	var r result
	select {
	case r = <-answered:
	case <-time.After(time.Minute):
		release()
		r = <-answered
		t.Fatalf("cancel --force waited for the pass that holds the row: %+v", r)
	}
	r.wantCode(t, 1)
	if r.stdout != "cancelled 0 messages\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	r.wantOneError(t, "pepsi queue cancel: busy, not cancelled: "+strconv.FormatInt(run, 10)+" (its stage's pass holds the row locked")
	if st := statusOf(s, run); st != "running" {
		t.Errorf("message %d is %s after the busy cancel, want running", run, st)
	}
	release()
	s.WaitFor("the pass done", time.Minute, func() bool { return statusOf(s, run) == "done" }, d.logs)
	if n := s.Int64("SELECT count(*) FROM test_passes WHERE id = $1 AND pid <> 0", run); n != 1 {
		t.Errorf("%d passes of %d committed, want 1", n, run)
	}
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
	if strings.Contains(d.logs.String(), "level=ERROR") {
		t.Errorf("dispatcher errors:\n%s", d.logs)
	}
	s.Check(testkit.Settled)
}
