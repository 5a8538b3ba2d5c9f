package worker_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// TestOneProcessor: a stage program runs on one processor, unless
// GOMAXPROCS is set in its environment.
func TestOneProcessor(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)

	runtime.GOMAXPROCS(2)
	t.Setenv("GOMAXPROCS", "")
	if got := worker.OneProcessor(); got != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("without GOMAXPROCS: OneProcessor = %d, runtime %d; want 1", got, runtime.GOMAXPROCS(0))
	}

	runtime.GOMAXPROCS(3)
	t.Setenv("GOMAXPROCS", strconv.Itoa(3))
	if got := worker.OneProcessor(); got != 3 {
		t.Errorf("with GOMAXPROCS=3: OneProcessor = %d, want 3 (left as set)", got)
	}
}
