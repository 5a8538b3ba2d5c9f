package app

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// result is what one run of pepsi left behind.
type result struct {
	code           int
	stdout, stderr string
}

// pepsi runs the app in-process, as Main does, with argv "pepsi args...".
func pepsi(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runArgv(t, stdin, append([]string{"pepsi"}, args...))
}

func runArgv(t *testing.T, stdin string, argv []string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(argv, "test", &out, &errb, strings.NewReader(stdin))
	return result{code, out.String(), errb.String()}
}

// env points pepsi at dsn through PEPSI_DSN and at conf (written to a
// temporary pepsi.conf; "" for an empty file) through PEPSI_CONFIG, so no
// file of the machine is read. It returns the file's path.
func env(t *testing.T, dsn, conf string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pepsi.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PEPSI_DSN", dsn)
	t.Setenv("PEPSI_CONFIG", path)
	return path
}

// wantCode fails t unless r exited with code.
func (r result) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

// wantOneError fails t unless stderr is one line containing want,
// optionally followed by the "Run '… --help'" hint.
func (r result) wantOneError(t *testing.T, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if !strings.Contains(lines[0], want) {
		t.Errorf("stderr %q does not contain %q", r.stderr, want)
	}
	if len(lines) > 2 || (len(lines) == 2 && !strings.HasPrefix(lines[1], "Run 'pepsi")) {
		t.Errorf("stderr is not one error line (plus a hint):\n%s", r.stderr)
	}
	if !strings.HasPrefix(lines[0], "pepsi") {
		t.Errorf("error line %q does not start with pepsi", lines[0])
	}
}

// queryInt runs a query returning one integer on dsn.
func queryInt(t *testing.T, dsn, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// binary builds cmd/pepsi once per test run (with version "test") and
// returns its path.
func binary(t *testing.T) string {
	t.Helper()
	return testkit.Build(t, "github.com/pepsi-dev/pepsi/cmd/pepsi", "-ldflags", "-X main.version=test")
}

func TestMain(m *testing.M) { testkit.Main(m) }

// exe runs the built binary (or a symlink to it) with stdin and returns
// its exit status and output.
func exe(t *testing.T, path, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %s: %v", path, err)
		}
		code = ee.ExitCode()
	}
	return result{code, out.String(), errb.String()}
}

func TestResolveAlias(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"/usr/bin/pepsi-migrate", "status", "-c", "x"}, []string{"pepsi", "migrate", "status", "-c", "x"}},
		{[]string{"pepsi-enqueue"}, []string{"pepsi", "enqueue"}},
		{[]string{"./pepsi-dispatch", "--standby"}, []string{"pepsi", "dispatch", "--standby"}},
		{[]string{"/usr/bin/pepsi", "migrate"}, []string{"/usr/bin/pepsi", "migrate"}},
		{[]string{"pepsi-frobnicate", "x"}, []string{"pepsi-frobnicate", "x"}},
		{nil, []string{"pepsi"}},
	} {
		if got := resolveAlias(tc.in); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("resolveAlias(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := pepsi(t, "", args...)
		r.wantCode(t, 0)
		if r.stdout != "pepsi test\n" {
			t.Errorf("%q printed %q", args, r.stdout)
		}
	}
	pepsi(t, "", "version", "extra").wantCode(t, 2)
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `pepsi: unknown command "frobnicate"`},
		{[]string{"--bogus"}, "pepsi: flag provided but not defined: -bogus"},
		{[]string{"migrate", "--bogus"}, "pepsi migrate: flag provided but not defined: -bogus"},
		{[]string{"migrate", "status", "--bogus"}, "pepsi migrate status: flag provided but not defined: -bogus"},
		{[]string{"migrate", "sideways"}, `pepsi migrate: unknown migrate command "sideways"`},
		{[]string{"migrate", "-c"}, "flag needs an argument"},
		{[]string{"enqueue", "x"}, "pepsi enqueue: --stage is required"},
		{[]string{"help", "frobnicate"}, `no such command "frobnicate"`},
	} {
		r := pepsi(t, "", tc.args...)
		r.wantCode(t, 2)
		r.wantOneError(t, tc.want)
		if r.stdout != "" {
			t.Errorf("%q wrote to stdout:\n%s", tc.args, r.stdout)
		}
	}
}

func TestHelp(t *testing.T) {
	r := pepsi(t, "")
	r.wantCode(t, 2) // no command: the help, and a usage exit status
	if !strings.Contains(r.stdout, "COMMANDS:") || r.stderr != "" {
		t.Errorf("no command: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "migrate"}, {"migrate", "--help"}, {"help", "migrate", "status"}, {"enqueue", "-h"}} {
		r := pepsi(t, "", args...)
		r.wantCode(t, 0)
		if r.stderr != "" || !strings.Contains(r.stdout, "USAGE:") {
			t.Errorf("%q: stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
	a, b := pepsi(t, "", "help", "migrate", "status"), pepsi(t, "", "migrate", "status", "--help")
	if a.stdout != b.stdout || !strings.Contains(a.stdout, "pepsi migrate status") {
		t.Errorf("help migrate status:\n%s\nmigrate status --help:\n%s", a.stdout, b.stdout)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "pepsi.conf")
	os.WriteFile(bad, []byte("[database]\nDSN = postgres:///x\n\n[pepsi-dispatch]\nMAX_RUNTME = 5\n"), 0o644)
	t.Setenv("PEPSI_DSN", "")
	t.Setenv("PEPSI_CONFIG", "")
	for _, args := range [][]string{
		{"-c", bad, "migrate"},
		{"migrate", "-c", bad},
		{"migrate", "status", "-c", bad},
		{"enqueue", "-c", bad, "--stage", "x"},
	} {
		r := pepsi(t, "", args...)
		r.wantCode(t, 2)
		r.wantOneError(t, bad+":5: unknown key")
		if strings.Contains(r.stderr, "Run '") {
			t.Errorf("a configuration error with a --help hint:\n%s", r.stderr)
		}
	}
	t.Setenv("PEPSI_CONFIG", bad)
	pepsi(t, "", "migrate").wantOneError(t, bad+":5: unknown key")

	// A file named with -c that does not exist is a configuration error.
	r := pepsi(t, "", "migrate", "-c", filepath.Join(dir, "nope.conf"))
	r.wantCode(t, 2)
	r.wantOneError(t, "nope.conf: cannot read")

	// A DSN that does not parse: exit 2, naming where it came from.
	env(t, "postgres://%%", "")
	r = pepsi(t, "", "migrate")
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi migrate: PEPSI_DSN: cannot parse")
}

// TestConfigFlagPlacement: -c is accepted before and after the command
// name, and the one nearest the command wins.
func TestConfigFlagPlacement(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.conf")
	os.WriteFile(bad, []byte("[nonsense]\n"), 0o644)
	good := filepath.Join(dir, "good.conf")
	os.WriteFile(good, []byte("[database]\nDSN = host=/nonexistent-pepsi-socket-dir\n"), 0o644)
	t.Setenv("PEPSI_DSN", "")
	t.Setenv("PEPSI_CONFIG", bad)
	for _, args := range [][]string{
		{"-c", good, "migrate", "status"},
		{"migrate", "-c", good, "status"},
		{"migrate", "status", "-c", good},
		{"-c", bad, "migrate", "--config", good, "status"},
		{"-c", bad, "migrate", "-c", bad, "status", "-c", good},
	} {
		// The good file gets as far as connecting (exit 1), the bad one
		// would stop at its first line (exit 2).
		r := pepsi(t, "", args...)
		r.wantCode(t, 1)
		r.wantOneError(t, "pepsi migrate status: connect:")
	}
}
