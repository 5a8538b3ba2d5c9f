package dispatch

import (
	"strings"
	"testing"
	"time"
)

// TestCrashWithPipeline: a worker dies with three messages handed to it;
// the head fails and the two behind it are requeued and later done.
func TestCrashWithPipeline(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 1\nQUEUE_LIMIT = 4")
	ids := b.enqueue("work", "work=crash", "work=finish", "work=finish")
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "failed" || !strings.HasPrefix(derr, "worker crashed: exit status 3") {
		t.Errorf("head: %s %q, want failed with the crash", st, derr)
	}
	for _, id := range ids[1:] {
		if st, _, _ := b.row(id); st != "done" {
			t.Errorf("message %d: %s, want done", id, st)
		}
		if n := b.int64("SELECT attempts FROM pepsi.state WHERE id = $1", id); n != 1 {
			t.Errorf("message %d: attempts %d, want 1 (the requeue takes back its unrun attempt)", id, n)
		}
	}
	b.checkInvariants()
	if n := b.int64("SELECT crashes FROM pepsi.stage_stats WHERE stage = 'work'"); n != 1 {
		t.Errorf("crashes = %d, want 1", n)
	}
	// The two behind the head are put back unrun. Under load a later claim
	// of them may be put back once more without running (its result came
	// back while the dispatcher was without its lock, or found no worker
	// to take it); checkInvariants checked that every claim is booked once.
	if n := b.int64("SELECT reset FROM pepsi.dispatch_stats"); n < 2 {
		t.Errorf("reset = %d, want at least 2", n)
	}
}

// TestCommittedThenCrashed: a stage that moved the row and died before
// answering is never marked failed.
func TestCommittedThenCrashed(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 1\nQUEUE_LIMIT = 1", "next\nPARALLELISM = 1")
	ids := b.enqueue("work", "work=crashafter", "work=advcrash:next")
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "done" || derr != "" {
		t.Errorf("finished-then-crashed: %s %q, want done", st, derr)
	}
	if st, stage, _ := b.row(ids[1]); st != "done" || stage != "next" {
		t.Errorf("advanced-then-crashed: %s at %s, want done at next", st, stage)
	}
	b.checkInvariants()
}

// TestHang: a head message unanswered for MAX_RUNTIME kills the worker; it
// fails as a timeout and the messages behind it are requeued.
func TestHang(t *testing.T) {
	b := setup(t, fast+"\nMAX_RUNTIME = 4", "work\nPARALLELISM = 1\nQUEUE_LIMIT = 3")
	ids := b.enqueue("work", "work=hang", "work=finish", "work=finish")
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "failed" || !strings.Contains(derr, "timeout") {
		t.Errorf("hung message: %s %q, want failed by timeout", st, derr)
	}
	for _, id := range ids[1:] {
		if st, _, _ := b.row(id); st != "done" {
			t.Errorf("message %d: %s, want done", id, st)
		}
	}
	b.checkInvariants()
	if n := b.int64("SELECT timeouts FROM pepsi.stage_stats WHERE stage = 'work'"); n != 1 {
		t.Errorf("timeouts = %d, want 1", n)
	}
	if !strings.Contains(b.logs.String(), "message timed out; killing worker") {
		t.Errorf("no timeout log line:\n%s", b.logs)
	}
}

// TestAnswers covers what a stage can answer: a non-zero code fails the
// message and the worker survives; 0 without moving fails it; a stage's own
// fail and pause are left alone.
func TestAnswers(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 1\nQUEUE_LIMIT = 2")
	ids := b.enqueue("work", "work=exit:7", "work=noop", "work=fail:bad-input", "work=finish", "work=pause:1h")
	b.start()
	b.waitFor("all answered", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.state WHERE status IN ('pending', 'running')") == 0
	})
	want := []struct{ status, derr string }{
		{"failed", "stage work answered 7: failing on purpose"},
		{"failed", "stage reported success but did not move the message"},
		{"failed", ""},
		{"done", ""},
		{"paused", ""},
	}
	for i, w := range want {
		if st, _, derr := b.row(ids[i]); st != w.status || derr != w.derr {
			t.Errorf("message %d: %s %q, want %s %q", i, st, derr, w.status, w.derr)
		}
	}
	if n := b.int64("SELECT count(DISTINCT pid) FROM test_workers"); n != 1 {
		t.Errorf("%d workers started, want 1 (non-zero answers keep the worker)", n)
	}
	b.checkInvariants()
	if n := b.int64("SELECT failed FROM pepsi.stage_stats WHERE stage = 'work'"); n != 1 {
		t.Errorf("stage failed = %d, want 1 (the non-zero answer)", n)
	}
}

// TestProtocolErrors: garbage, an over-long line and an answer with nothing
// outstanding fail the head, stop the worker and requeue the rest.
func TestProtocolErrors(t *testing.T) {
	for _, tc := range []struct{ action, reason string }{
		{"garbage", `protocol error: status line does not start with a decimal code: "hello world"`},
		{"long", "protocol error: status line longer than 65536 bytes"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			b := setup(t, fast, "work\nPARALLELISM = 1\nQUEUE_LIMIT = 3")
			ids := b.enqueue("work", "work="+tc.action, "work=finish", "work=finish")
			b.start()
			b.waitSettled(time.Minute)
			if st, _, derr := b.row(ids[0]); st != "failed" || derr != tc.reason {
				t.Errorf("head: %s %q, want failed %q", st, derr, tc.reason)
			}
			for _, id := range ids[1:] {
				if st, _, _ := b.row(id); st != "done" {
					t.Errorf("message %d: %s, want done", id, st)
				}
			}
			b.checkInvariants()
		})
	}
	t.Run("extra", func(t *testing.T) {
		b := setup(t, fast, "work\nPARALLELISM = 1\nQUEUE_LIMIT = 1")
		ids := b.enqueue("work", "work=extra", "work=finish")
		b.start()
		b.waitSettled(time.Minute)
		for _, id := range ids {
			if st, _, _ := b.row(id); st != "done" {
				t.Errorf("message %d: %s, want done", id, st)
			}
		}
		if !strings.Contains(b.logs.String(), "status line with no message outstanding") {
			t.Errorf("no protocol error logged:\n%s", b.logs)
		}
		b.checkInvariants()
	})
}

// TestClosedStdout: a worker that closes stdout and keeps running is killed
// and its message fails as a crash.
func TestClosedStdout(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 1")
	ids := b.enqueue("work", "work=closeout", "work=finish")
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "failed" || !strings.HasPrefix(derr, "worker crashed") {
		t.Errorf("head: %s %q", st, derr)
	}
	if st, _, _ := b.row(ids[1]); st != "done" {
		t.Errorf("second: %s, want done", st)
	}
	b.checkInvariants()
}

// TestRetries: with RETRIES, a failed pass pauses the message with a
// growing delay until its attempts are spent; then it fails.
func TestRetries(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 1\nRETRIES = 2\nRETRY_DELAY = 0.2\nRETRY_DELAY_MAX = 0.3", "next")
	ids := b.enqueue("work", "work=exit:3", "work=advance:next next=finish")
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "failed" || derr != "stage work answered 3: failing on purpose" {
		t.Errorf("retried message: %s %q", st, derr)
	}
	if n := b.int64("SELECT attempts FROM pepsi.state WHERE id = $1", ids[0]); n != 3 {
		t.Errorf("attempts %d, want 3 (1 + RETRIES)", n)
	}
	if st, stage, _ := b.row(ids[1]); st != "done" || stage != "next" {
		t.Errorf("other message: %s at %s", st, stage)
	}
	if n := b.int64("SELECT attempts FROM pepsi.state WHERE id = $1", ids[1]); n != 1 {
		t.Errorf("advanced message: attempts %d, want 1 (counted per stage)", n)
	}
	b.checkInvariants()
	if n := b.int64("SELECT paused FROM pepsi.dispatch_stats"); n != 2 {
		t.Errorf("paused = %d, want 2", n)
	}
	if n := b.int64("SELECT failed FROM pepsi.stage_stats WHERE stage = 'work'"); n != 3 {
		t.Errorf("stage failed = %d, want 3 (every failed pass)", n)
	}
}
