package worker_test

import (
	"slices"
	"testing"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestDependsOnNothingOfTheDispatcher: a Go stage links the worker
// protocol, the configuration it reads its DSN from and the meaning of
// PostgreSQL's errors, and the W3C trace context of its passes; nothing
// of the dispatcher, its store or its span export.
func TestDependsOnNothingOfTheDispatcher(t *testing.T) {
	allowed := []string{testkit.Module + "/pkg/protocol", testkit.Module + "/pkg/config", testkit.Module + "/pkg/pgerr", testkit.Module + "/pkg/trace"}
	for _, p := range testkit.Deps(t, testkit.Module+"/pkg/worker") {
		if !slices.Contains(allowed, p) {
			t.Errorf("pkg/worker depends on %s; it may depend on %v only", p, allowed)
		}
	}
}
