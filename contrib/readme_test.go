package contrib_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// readmeSteps returns the shell lines of README's "A pipeline of your
// own": the first ```sh block after its heading.
func readmeSteps(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "**A pipeline of your own**")
	if !ok {
		t.Fatal(`README.md has no "**A pipeline of your own**"`)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal(`README.md's "A pipeline of your own" has no sh block`)
	}
	return strings.Split(strings.TrimSuffix(block, "\n"), "\n")
}

// copyTree copies the source tree (the module, not its build outputs nor
// npm's node_modules) to dir, as a fresh checkout has it.
func copyTree(t *testing.T, dir string) {
	t.Helper()
	for _, top := range []string{"go.mod", "go.sum", "Makefile", "cmd", "contrib", "internal", "pkg", "scripts", "sql"} {
		err := filepath.WalkDir(filepath.Join("..", top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel := strings.TrimPrefix(path, ".."+string(filepath.Separator))
			if d.IsDir() && (d.Name() == "node_modules" || rel == filepath.Join("contrib", "node", "build")) {
				return filepath.SkipDir // npm's and the Node tests' outputs (contrib/node)
			}
			to := filepath.Join(dir, rel)
			if d.IsDir() {
				return os.MkdirAll(to, 0o755)
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, info.Mode().Perm())
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadmePipeline follows README's "A pipeline of your own" literally
// in a copy of the source tree, on a database of the test server created
// by its createdb (the name pepsi made unique): its commands succeed, and
// the dispatcher it starts with contrib/pipeline/pepsi.conf takes every
// message through parse to done at deliver.
func TestReadmePipeline(t *testing.T) {
	t.Parallel()
	need(t, "createdb", "apt-get install -y postgresql-client", "createdb", "--version")
	steps := readmeSteps(t)
	last := steps[len(steps)-1]
	if !strings.Contains(last, " dispatch") {
		t.Fatalf("the section's last step %q does not start the dispatcher", last)
	}

	server := pgtest.ServerDSN()
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "pepsi_test_readme_" + hex.EncodeToString(r[:])
	dsn := pgadmin.WithDatabase(server, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgadmin.Drop(ctx, server, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	sc, err := pgconn.ParseConfig(server)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PEPSI_CONFIG=", "PEPSI_DSN=", "PGHOST=" + sc.Host, "PGPORT=" + strconv.Itoa(int(sc.Port)), "PGUSER=" + sc.User}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PEPSI_") && !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}

	// The database's name, and the export of PEPSI_DSN, are the test's.
	var script []string
	var created, exported bool
	enqueued := 0
	seq := regexp.MustCompile(`^seq 1 (\d+) \|`)
	for _, l := range steps[:len(steps)-1] {
		switch {
		case strings.HasPrefix(l, "createdb pepsi "):
			l, created = "createdb "+name, true
		case strings.HasPrefix(l, "export PEPSI_DSN="):
			l, exported = "export PEPSI_DSN='"+dsn+"'", true
		case seq.MatchString(l):
			enqueued, _ = strconv.Atoi(seq.FindStringSubmatch(l)[1])
		}
		script = append(script, l)
	}
	if !created || !exported || enqueued == 0 {
		t.Fatalf("the section lacks createdb pepsi (%v), export PEPSI_DSN= (%v) or seq 1 N | … enqueue (%d):\n%s",
			created, exported, enqueued, strings.Join(steps, "\n"))
	}
	dir := t.TempDir()
	copyTree(t, dir)
	run := func(lines ...string) (*exec.Cmd, *testkit.Buffer) {
		cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", strings.Join(lines, "\n"))
		cmd.Dir, cmd.Env = dir, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out testkit.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, &out
	}
	cmd, out := run(script...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("the section's steps before the dispatcher: %v\n%s", err, out)
	}

	cmd, out = run("export PEPSI_DSN='"+dsn+"'", "exec "+last)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(sql string) int {
		var n int
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	testkit.Wait(t, "every message done", 3*time.Minute, func() bool {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the dispatcher exited (%v) before every message was done:\n%s", err, out)
		default:
		}
		return count("SELECT count(*)::int FROM pepsi.state WHERE status = 'done'") == enqueued
	}, out)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	stopped = true
	if err != nil {
		t.Errorf("the dispatcher stopped with %v:\n%s", err, out)
	}
	if n := count("SELECT count(*)::int FROM pepsi.state WHERE status = 'done' AND stage = 'deliver'"); n != enqueued {
		t.Errorf("%d messages done at deliver, want %d", n, enqueued)
	}
	if n := count("SELECT count(*)::int FROM pepsi.state") + count("SELECT count(*)::int FROM pepsi.ingress"); n != enqueued {
		t.Errorf("%d messages in all, want %d", n, enqueued)
	}

	// What it says to look at meanwhile.
	cmd, out = run("export PEPSI_DSN='"+dsn+"'", "bin/pepsi -c contrib/pipeline/pepsi.conf queue")
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "\ndeliver ") {
		t.Errorf("queue: %v\n%s", err, out)
	}
}
