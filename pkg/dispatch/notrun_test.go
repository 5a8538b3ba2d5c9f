package dispatch

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestNotRunAnswers: an answer 75 puts its message back with the reason
// and counts it in the stage's not_run, not as a pass; a worker's exit
// 75 does so for the head of its pipeline; one log line a minute per
// stage says so, with the count since the last.
func TestNotRunAnswers(t *testing.T) {
	u := newUnit(t)
	w := u.worker("a", 1, 2, 3)
	u.answers(w, []protocol.Status{{Code: protocol.NotRun, Text: "x"}, {Code: protocol.NotRun}})
	const why = "stage a answered 75: not run, not counted as an attempt"
	want := []queue.Settle{
		{ID: 1, Stage: "a", Verdict: queue.NotRun, Delay: notRunDelay, Reason: why + ": x"},
		{ID: 2, Stage: "a", Verdict: queue.NotRun, Delay: notRunDelay, Reason: why},
	}
	if len(u.plan.settles) != 2 || u.plan.settles[0] != want[0] || u.plan.settles[1] != want[1] {
		t.Fatalf("settles %+v, want %+v", u.plan.settles, want)
	}
	if s := u.tally.stages["a"]; s == nil || s.NotRun != 2 || s.Processed+s.Failed != 0 || u.tally.global.StagePasses != 0 {
		t.Fatalf("tally %+v, global %+v: want 2 not run and no pass", s, u.tally.global)
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(u.log.String(), "\n") {
			if strings.Contains(l, "stage answered 75") {
				out = append(out, l)
			}
		}
		return out
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "level=INFO") || !strings.Contains(l[0], "stage=a id=1") ||
		!strings.Contains(l[0], "answers=1") {
		t.Fatalf("log lines %q, want one at info for message 1", l)
	}

	u.at = u.at.Add(notRunLogGap + time.Second)
	u.answers(w, []protocol.Status{{Code: protocol.NotRun}})
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "id=3") || !strings.Contains(l[1], "answers=2 since=1m1s") {
		t.Fatalf("log lines %q, want a second one a minute later, counting 2", l)
	}

	// A worker that exits 75: its head goes back with the reason, the
	// rest as not run.
	err := exec.Command("/bin/sh", "-c", "exit 75").Run()
	if exitCode(err) != protocol.NotRun {
		t.Fatalf("sh exit 75: %v", err)
	}
	u.plan.settles = nil
	w2 := u.worker("a", 7, 8)
	u.exited(w2, err)
	if len(u.plan.settles) != 2 || u.plan.settles[0].ID != 7 || !strings.HasPrefix(u.plan.settles[0].Reason, "stage a's worker exited 75") ||
		u.plan.settles[0].Delay != notRunDelay || u.plan.settles[1].Reason != "" || u.plan.settles[1].Verdict != queue.NotRun {
		t.Fatalf("after the exit 75: settles %+v", u.plan.settles)
	}
	if n := u.tally.stages["a"].NotRun; n != 4 {
		t.Errorf("not_run %d after 3 answers and an exit, want 4", n)
	}
}
