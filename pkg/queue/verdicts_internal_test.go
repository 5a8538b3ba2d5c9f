package queue

import (
	"regexp"
	"slices"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// TestSettleVerdictWords: the settle statement spells the verdicts as the
// Verdict constants do, and those of the moves as pkg/protocol names them:
// the set of moves is defined once.
func TestSettleVerdictWords(t *testing.T) {
	known := []Verdict{PassOK, PassFailed, NotRun, Advance, Finish, Pause, Join}
	for _, m := range []protocol.Move{protocol.Advance, protocol.Finish, protocol.Pause, protocol.Join} {
		if !slices.Contains(known, Verdict(m.String())) {
			t.Errorf("move %q has no verdict", m)
		}
	}
	used := map[Verdict]bool{}
	quoted := regexp.MustCompile(`'([a-z]+)'`)
	for _, m := range regexp.MustCompile(`x\.verdict (?:= '[a-z]+'|IN \([^)]*\))|v\.verdict = '[a-z]+'`).FindAllString(settleSQL, -1) {
		for _, q := range quoted.FindAllStringSubmatch(m, -1) {
			v := Verdict(q[1])
			if !slices.Contains(known, v) {
				t.Errorf("settleSQL tests verdict %q, which no Verdict constant names", v)
			}
			used[v] = true
		}
	}
	for _, v := range known {
		if !used[v] {
			t.Errorf("settleSQL never tests verdict %q", v)
		}
	}
}
