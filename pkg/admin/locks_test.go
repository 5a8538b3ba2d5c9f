package admin

import (
	"strconv"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestFreeStageKey: freeStage spells in decimal the stage lock class
// pkg/queue's locks.go names.
func TestFreeStageKey(t *testing.T) {
	if want := "(" + strconv.Itoa(queue.StageLockClass) + ","; !strings.Contains(freeStage, want) {
		t.Errorf("freeStage does not spell queue.StageLockClass as %q: %s", want, freeStage)
	}
}
