package app

import (
	"testing"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestDependsOnNoStageKit: the commands do not link pkg/worker, the kit
// for stage programs.
func TestDependsOnNoStageKit(t *testing.T) {
	for _, p := range testkit.Deps(t, testkit.Module+"/pkg/app") {
		if p == testkit.Module+"/pkg/worker" {
			t.Errorf("pkg/app depends on %s", p)
		}
	}
}
