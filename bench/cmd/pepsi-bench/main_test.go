package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// bin is where TestMain builds pepsi and pepsi-bench, side by side (as
// make bench does in bin/), so that pepsi-bench finds its pepsi there.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pepsi-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// built is the set of binaries built so far.
var built = map[string]bool{}

// binaries builds pepsi (the product's command, in the root module, from
// this checkout) and pepsi-bench into bin once, and returns pepsi-bench's
// path.
func binaries(t *testing.T) string {
	t.Helper()
	for _, pkg := range []struct{ name, dir string }{
		{"pepsi", "../../../cmd/pepsi"},
		{"pepsi-bench", "."},
	} {
		if built[pkg.name] {
			continue
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, pkg.name), ".")
		cmd.Dir = pkg.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg.dir, err, out)
		}
		built[pkg.name] = true
	}
	return filepath.Join(bin, "pepsi-bench")
}

// result is what a run of pepsi-bench did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

// wantOneError fails t unless stderr is one line, "pepsi-bench: …"
// containing want, optionally followed by the "Run '… --help'" hint.
func (r result) wantOneError(t *testing.T, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if !strings.Contains(lines[0], want) || !strings.HasPrefix(lines[0], "pepsi-bench: ") {
		t.Errorf("stderr %q: want one line starting pepsi-bench: and containing %q", r.stderr, want)
	}
	if len(lines) > 2 || (len(lines) == 2 && lines[1] != "Run 'pepsi-bench --help' for usage.") {
		t.Errorf("stderr is not one error line (plus a hint):\n%s", r.stderr)
	}
}

// benchDatabase is a database name for a test's run of its own.
func benchDatabase() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pepsi_bench_test_" + hex.EncodeToString(b[:])
}

// benchEnv is the environment of a test's run: the test server, no
// configuration file, no other pepsi.
func benchEnv() []string {
	return []string{"PEPSI_DSN=" + pgtest.ServerDSN(), "PEPSI_CONFIG=", "PEPSI_BENCH_EXE="}
}

// exeEnv runs path with args and extra environment variables.
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

// TestBench runs pepsi-bench (the real binaries: the dispatcher is the
// pepsi beside it, the stage programs are pepsi-bench stage) with tiny
// sizes and checks that the report has every figure, each with its
// ceiling and ratio. How fast anything is, is not checked: that is what
// the benchmark is for.
func TestBench(t *testing.T) {
	exe := binaries(t)
	db := benchDatabase()
	args := []string{"--database", db,
		"--stages", "2", "--parallelism", "1", "--queue-limit", "4", "--wide-workers", "3",
		"--commit-messages", "60", "--messages", "200", "--ceiling-time", "200ms", "--load-time", "300ms",
		"--wake-samples", "5", "--enqueue-messages", "300", "--enqueue-runs", "1", "--claim-rows", "1500",
		"--ingress-time", "1s"}
	r := exeEnv(t, exe, benchEnv(), args...)
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
	if !strings.Contains(r.stderr, "pepsi-bench: wake latency") {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}

	// The database is dropped afterwards.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", db).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s left behind (%d, %v)", db, n, err)
	}
}

// TestBenchRate runs the rate step, which pepsi-bench runs only when
// --only names it, for 1.5 s (2 whole seconds counted), and checks that
// its figures are there. How close to its RATE it came is not checked.
func TestBenchRate(t *testing.T) {
	exe := binaries(t)
	r := exeEnv(t, exe, benchEnv(),
		"--database", benchDatabase(), "--only", "rate", "--rate-time", "1500ms", "--parallelism", "1", "--queue-limit", "4")
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
}

// TestUsage: mistakes on the command line exit 2 with one line, before
// any database is touched; so does a --pepsi that is not there.
func TestUsage(t *testing.T) {
	exe := binaries(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stages", "0"}, "--stages 0: must be at least 1"},
		{[]string{"--load-fraction", "2"}, "--load-fraction 2"},
		{[]string{"--ingress-runs", "0"}, "--ingress-runs 0"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--only", "nope"}, `--only: no step "nope"`},
		{[]string{"--rate-time", "0s"}, "--rate-time 0s: must be positive"},
		{[]string{"--sustained-time", "2m"}, "--sustained-time 2m0s"},
		{[]string{"--sustained-time", "190s"}, "--sustained-time 3m10s"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"stage", "--mode", "x"}, `--mode "x": want tx or statusline`},
		{[]string{"--pepsi", "/nonexistent/pepsi"}, "--pepsi /nonexistent/pepsi: not an executable file"},
	} {
		r := exeEnv(t, exe, benchEnv(), tc.args...)
		r.wantCode(t, 2)
		r.wantOneError(t, tc.want)
	}
	// PEPSI_BENCH_EXE names the pepsi measured when --pepsi is not given.
	r := exeEnv(t, exe, append(benchEnv(), "PEPSI_BENCH_EXE=/nonexistent/other"), "--only", "ceiling")
	r.wantCode(t, 2)
	r.wantOneError(t, "--pepsi /nonexistent/other: not an executable file")
}

// TestFindPepsi: --pepsi (or PEPSI_BENCH_EXE) first, then the pepsi beside
// pepsi-bench, then pepsi on PATH.
func TestFindPepsi(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "bin", "pepsi-bench")
	onPath := filepath.Join(dir, "path")
	for _, d := range []string{filepath.Dir(self), onPath} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", onPath)
	if _, err := findPepsi("", self); err == nil {
		t.Error("no pepsi anywhere: no error")
	}
	write := func(p string) {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(onPath, "pepsi"))
	if got, err := findPepsi("", self); err != nil || got != filepath.Join(onPath, "pepsi") {
		t.Errorf("on PATH: %q, %v", got, err)
	}
	write(filepath.Join(dir, "bin", "pepsi"))
	if got, err := findPepsi("", self); err != nil || got != filepath.Join(dir, "bin", "pepsi") {
		t.Errorf("beside pepsi-bench: %q, %v", got, err)
	}
	given := filepath.Join(dir, "other")
	write(given)
	if got, err := findPepsi(given, self); err != nil || got != given {
		t.Errorf("given: %q, %v", got, err)
	}
}

// TestManPage: every flag of pepsi-bench is an entry (the line after .TP)
// of its page, bench/man/pepsi-bench.1, and the stage subcommand's flags
// are entries of its .SS section.
func TestManPage(t *testing.T) {
	data, err := os.ReadFile("../../man/pepsi-bench.1")
	if err != nil {
		t.Fatal(err)
	}
	// tags are the .TP entries of each section, by .SH/.SS heading.
	tags := map[string][]string{}
	section, afterTP := "", false
	norm := strings.NewReplacer(`\-`, "-", `\fI`, "", `\fR`, "", `\fB`, "", `\fP`, "", `"`, "")
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, ".SH ") || strings.HasPrefix(line, ".SS "):
			section = strings.TrimSpace(line[4:])
		case line == ".TP":
			afterTP = true
			continue
		case afterTP:
			f := strings.Fields(norm.Replace(line))
			if len(f) > 1 {
				tags[section] = append(tags[section], strings.Join(f[1:], " "))
			}
		}
		afterTP = false
	}
	has := func(section, flag string) bool {
		for _, tag := range tags[section] {
			for _, word := range strings.FieldsFunc(tag, func(r rune) bool { return r == ' ' || r == ',' }) {
				if word == flag {
					return true
				}
			}
		}
		return false
	}
	terms := func(f cli.Flag) []string {
		var out []string
		for _, n := range f.Names() {
			if len(n) == 1 {
				out = append(out, "-"+n)
			} else {
				out = append(out, "--"+n)
			}
		}
		return out
	}
	app := newApp(io.Discard, io.Discard, strings.NewReader(""))
	for _, f := range app.Flags {
		for _, term := range terms(f) {
			if !has("OPTIONS", term) {
				t.Errorf("pepsi-bench.1: option %s is not an entry of OPTIONS", term)
			}
		}
	}
	for _, cmd := range app.Commands {
		for _, f := range cmd.Flags {
			for _, term := range terms(f) {
				if !has(cmd.Name, term) && !has("OPTIONS", term) {
					t.Errorf("pepsi-bench.1: option %s of pepsi-bench %s is not an entry of section %s", term, cmd.Name, cmd.Name)
				}
			}
		}
	}
	for _, v := range []string{"PEPSI_DSN", "PEPSI_BENCH_EXE", "PEPSI_CONFIG", "PEPSI_BENCH_CPUPROFILE"} {
		if !strings.Contains(string(data), ".B "+v+"\n") {
			t.Errorf("pepsi-bench.1: %s is not an entry of ENVIRONMENT", v)
		}
	}
}
