package app

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMigrateOnline: `pepsi migrate` returns at once while dispatchers run
// on every stage set, and their work goes on before, during and after.
func TestMigrateOnline(t *testing.T) {
	f := newSetsDB(t)
	a, b := startSet(t, "parse"), startSet(t, "enrich,deliver")

	const half = 200
	f.enqueue(half, pipeline("2ms"))
	// The binary, bounded: a migrate that waits for the dispatchers to
	// exit hangs here until the deadline, and fails.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		out, err := exec.CommandContext(ctx, binary(t), "migrate").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "schema is up to date (version ") {
			t.Fatalf("pepsi migrate beside running dispatchers: %v\n%s", err, out)
		}
	}
	f.enqueue(half, pipeline("2ms"))
	f.WaitSettled(setsWait, a.logs, b.logs)
	for _, d := range []*daemon{a, b} {
		if code := d.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("%s: SIGTERM: exit %d, want 0", d.name, code)
		}
	}
	f.checkEnd(nil)
	if n := f.Count("done"); n != 2*half {
		t.Errorf("%d done, want %d", n, 2*half)
	}
}
