package worker_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/worker"
	"github.com/pepsi-dev/pepsi/pkg/worker/workertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(statusLineStage) != "" {
		worker.MainOnStatusLine(onStatusLine) // run as a stage program
	}
	if os.Getenv(oneTripStage) != "" {
		worker.MainOneTrip(oneTripDispatched) // run as a stage program
	}
	if os.Getenv(graphStage) != "" {
		mainGraph() // run as a stage program
	}
	testkit.Main(m)
}

// stage builds contrib/go/stage, the example stage program, for the tests.
func stage(t *testing.T) string {
	t.Helper()
	return testkit.Build(t, "github.com/pepsi-dev/pepsi/contrib/go/stage")
}

// TestDispatched runs the Go example under a real dispatcher: two stages,
// several workers each, recycled often, with failures and retries mixed in.
func TestDispatched(t *testing.T) {
	bin := stage(t)
	p := workertest.Start(t,
		workertest.Stage{Name: "a", Program: bin + " --next b", Parallelism: 2, QueueLimit: 4, MaxMessages: 25},
		workertest.Stage{Name: "b", Program: bin, Parallelism: 2, QueueLimit: 8, MaxMessages: 40})
	const n = 300
	payloads := make([][]byte, n)
	for i := range payloads {
		switch i % 10 {
		case 3:
			payloads[i] = []byte{}
		case 7:
			payloads[i] = []byte("retry")
		default:
			payloads[i] = []byte(fmt.Sprintf("message %d", i))
		}
	}
	ids := p.Enqueue("a", payloads...)
	p.WaitSettled(2 * time.Minute)
	for i, id := range ids {
		r := p.Row(id)
		switch i % 10 {
		case 3:
			if r.Status != "failed" || r.Stage != "a" || r.Error != "empty payload" || len(r.Headers) != 1 {
				t.Errorf("empty message %d: %+v", id, r)
			}
		case 7:
			// Paused once at each stage: two passes at b.
			if r.Status != "done" || r.Stage != "b" || r.Attempts != 2 {
				t.Errorf("retried message %d: %+v, want done at b after 2 attempts there", id, r)
			}
		default:
			if r.Status != "done" || r.Stage != "b" || r.Attempts != 1 || r.Headers["a"] != "go" || r.Headers["b"] != "go" {
				t.Errorf("message %d: %+v", id, r)
			}
		}
	}
	p.Check()
	if got := p.Int64("SELECT paused FROM pepsi.dispatch_stats"); got != 2*n/10 {
		t.Errorf("dispatch_stats.paused = %d, want %d", got, 2*n/10)
	}
}

// run starts the example stage binary with args and stdin.
func run(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(stage(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestMainExit checks worker.Main's exit statuses and messages, as the
// dispatcher (or a shell) sees them.
func TestMainExit(t *testing.T) {
	noConf := "PEPSI_CONFIG=" // and no /etc/pepsi/pepsi.conf: PEPSI_DSN is enough
	t.Run("extra argument", func(t *testing.T) {
		_, stderr, code := run(t, []string{"PEPSI_DSN=postgres:///x"}, "", "extra")
		if code != 2 || !strings.HasPrefix(stderr, `stage: unexpected argument "extra"`) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("bad flag", func(t *testing.T) {
		_, stderr, code := run(t, []string{"PEPSI_DSN=postgres:///x"}, "", "--nope")
		if code != 2 || !strings.Contains(stderr, "flag provided but not defined: -nope") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("missing config", func(t *testing.T) {
		_, stderr, code := run(t, []string{"PEPSI_DSN="}, "", "-c", "/nonexistent/pepsi.conf")
		if code != 2 || stderr != "stage: /nonexistent/pepsi.conf: cannot read: no such file or directory\n" {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("no database", func(t *testing.T) {
		_, stderr, code := run(t, []string{noConf, "PEPSI_DSN=postgres:///x?host=/nonexistent&connect_timeout=2"}, "1\n")
		// 75 (protocol.NotRun): the database, not the messages, failed.
		if code != 75 || !strings.HasPrefix(stderr, "stage: connect to database: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	db, dsn := pgtest.New(t)
	p := &workertest.Pipeline{T: t, DB: db, DSN: dsn} // for WaitFor and Int64; no dispatcher
	t.Run("EOF", func(t *testing.T) {
		stdout, stderr, code := run(t, []string{noConf, "PEPSI_DSN=" + p.DSN}, "")
		if code != 0 || stdout != "" || stderr != "" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})
	t.Run("hello", func(t *testing.T) {
		// PEPSI_PROTOCOL=2: the hello comes first, then an answer to
		// each id line, with a token or without.
		c := db.Claimed(t, "a", []byte("x"), []byte("x"))
		in := idLine(c[0].ID, c[0].Pass) + idLine(c[1].ID, 0)
		for _, v := range []struct{ protocol, stdin, want string }{
			{"1", "", ""},
			{"x", "", ""},
			{"2", in, "hello token\n0\n0\n"},
		} {
			stdout, stderr, code := run(t, []string{noConf, "PEPSI_DSN=" + p.DSN, "PEPSI_STAGE=a", "PEPSI_PROTOCOL=" + v.protocol}, v.stdin, "--next", "b")
			if code != 0 || stdout != v.want || stderr != "" {
				t.Errorf("PEPSI_PROTOCOL=%s: exit %d, stdout %q, stderr %q; want 0, %q", v.protocol, code, stdout, stderr, v.want)
			}
		}
		for _, m := range c {
			if r := p.Row(m.ID); r.Status != "pending" || r.Stage != "b" {
				t.Errorf("message %d: %+v, want pending at b", m.ID, r)
			}
		}
	})
	t.Run("SIGTERM", func(t *testing.T) {
		cmd := exec.Command(stage(t))
		cmd.Env = append(os.Environ(), noConf, "PEPSI_DSN="+p.DSN)
		stdin, err := cmd.StdinPipe() // held open: the program waits for ids
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until it is connected (and so past flag parsing and signal
		// setup): its session shows in pg_stat_activity.
		p.WaitFor("the worker's session", 30*time.Second, func() bool {
			return p.Int64("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pepsi-worker stage'") == 1
		})
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("after SIGTERM: %v (stderr %q), want exit 0", err, errb.String())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("did not exit on SIGTERM")
		}
	})
}
