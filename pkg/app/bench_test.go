package app

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestBench runs "pepsi bench" (the real binary: the dispatcher and the
// stage programs are its children) with tiny sizes and checks that the
// report has every figure, each with its ceiling and ratio. How fast
// anything is, is not checked: that is what the benchmark is for.
func TestBench(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	db := benchDatabase()
	cmd := []string{"bench", "--database", db,
		"--stages", "2", "--parallelism", "1", "--queue-limit", "4", "--wide-workers", "3",
		"--commit-messages", "60", "--messages", "200", "--ceiling-time", "200ms", "--load-time", "300ms",
		"--wake-samples", "5", "--enqueue-messages", "300", "--enqueue-runs", "1", "--claim-rows", "1500",
		"--ingress-time", "1s"}
	r := exeEnv(t, bin, benchEnv(), cmd...)
	r.wantCode(t, 0)

	ratio := regexp.MustCompile(`\s\d+\.\d\d\s`)
	for _, want := range []string{
		"commit ceiling, 1 connection",
		"commit latency p50, 1 connection",
		"commit latency p99, 1 connection",
		"commit ceiling, 2 connections",
		"pepsi enqueue --lines, 300 messages",
		"claim (16 per stage), 1500 pending rows",
		"SQL ingress, 8 clients: pepsi.enqueue() transaction, messages held",
		"SQL ingress, 8 clients: pepsi.enqueue() transaction, messages consumed",
		"SQL ingress, 32 clients: pepsi.enqueue() transaction, messages held",
		"SQL ingress, 32 clients: pepsi.enqueue() transaction, messages consumed",
		"commit pipeline (2 stages × UPDATE + transition, 2 workers): messages",
		"commit pipeline (2 stages × UPDATE + transition, 2 workers): stage passes",
		"commit pipeline (2 stages × UPDATE + transition, 2 workers): enqueue → done p50",
		"commit pipeline (2 stages × UPDATE + transition, 2 workers): enqueue → done p99",
		"commit pipeline (2 stages × UPDATE + transition, 2 workers): dispatcher CPU per pass",
		"commit pipeline (2 stages × UPDATE + transition, 2 workers): dispatcher peak RSS",
		"status-line pipeline (2 no-op stages, 2 workers): messages",
		"status-line pipeline (2 no-op stages, 2 workers): stage passes",
		"status-line pipeline (2 no-op stages, 2 workers): enqueue → done p50",
		"status-line pipeline (2 no-op stages, 2 workers): enqueue → done p99",
		"status-line pipeline (2 no-op stages, 2 workers): dispatcher CPU per pass",
		"status-line pipeline (2 no-op stages, 3 workers): stage passes",
		"status-line pipeline (2 no-op stages, 3 workers): dispatcher CPU per pass",
		"status-line pipeline (2 no-op stages, 3 workers): dispatcher peak RSS",
		"wake latency, idle (enqueue commit → id read on a worker's stdin, 5 samples): p50",
		"wake latency, idle (enqueue commit → id read on a worker's stdin, 5 samples): p99",
	} {
		line := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, want) {
				line = l
				break
			}
		}
		switch {
		case line == "":
			t.Errorf("no figure %q in the report:\n%s", want, r.stdout)
		case !ratio.MatchString(line) && !strings.Contains(line, "(is a ceiling)") && !strings.Contains(line, "(is the floor)"):
			t.Errorf("figure without a ratio to its ceiling: %q", line)
		}
	}
	if !strings.Contains(r.stderr, "pepsi bench: wake latency") {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}

	// The database is dropped afterwards.
	admin, _ := pgtest.New(t)
	var n int
	if err := admin.Pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_database WHERE datname = $1", db).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s left behind (%d, %v)", db, n, err)
	}

	// Usage errors.
	for _, args := range [][]string{{"bench", "--stages", "0"}, {"bench", "--load-fraction", "2"}, {"bench", "--ingress-runs", "0"}, {"bench", "extra"}, {"bench", "stage", "--mode", "x"}} {
		r := exeEnv(t, bin, benchEnv(), args...)
		r.wantCode(t, 2)
	}
}

// TestBenchRate runs the rate step, which "pepsi bench" runs only when
// --only names it, for 1.5 s (2 whole seconds counted), and checks that
// its figures are there. How close to its RATE it came is not checked.
func TestBenchRate(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	r := exeEnv(t, bin, benchEnv(),
		"bench", "--database", benchDatabase(), "--only", "rate", "--rate-time", "1500ms", "--parallelism", "1", "--queue-limit", "4")
	r.wantCode(t, 0)
	for _, want := range []string{
		"RATE = 200/s stage, full queue, 2 s: handed out a second, mean",
		"RATE = 200/s stage, full queue, 2 s: handed out a second, least",
		"RATE = 200/s stage, full queue, 2 s: handed out a second, most",
		"RATE = 200/s stage: dispatcher CPU (user + system) over ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no figure %q in the report:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "commit ceiling") {
		t.Errorf("--only rate ran other steps:\n%s", r.stdout)
	}
	r = exeEnv(t, bin, benchEnv(), "bench", "--rate-time", "0s")
	r.wantCode(t, 2)
	for _, bad := range []string{"2m", "190s"} {
		r = exeEnv(t, bin, benchEnv(), "bench", "--sustained-time", bad)
		r.wantCode(t, 2)
		r.wantOneError(t, "pepsi bench: --sustained-time ")
	}
}

// benchDatabase is a database name for a test's "pepsi bench" of its own.
func benchDatabase() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pepsi_bench_test_" + hex.EncodeToString(b[:])
}

// benchEnv is the environment of a test's "pepsi bench": the test server,
// no configuration file.
func benchEnv() []string { return []string{"PEPSI_DSN=" + pgtest.ServerDSN(), "PEPSI_CONFIG="} }

// exeEnv is exe with extra environment variables.
func exeEnv(t *testing.T, path string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s: %v", path, err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}
