package app

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// child is a pepsi executable run as a child process, its stderr in logs.
type child struct {
	name   string
	cmd    *exec.Cmd
	logs   *testkit.Buffer
	exited chan error
}

// startChild starts path with args; it is killed when the test ends if
// it still runs.
func startChild(t *testing.T, path string, args ...string) *child {
	t.Helper()
	c := &child{name: path, cmd: exec.Command(path, args...), logs: &testkit.Buffer{}, exited: make(chan error, 1)}
	c.cmd.Stderr = c.logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exited <- c.cmd.Wait() }()
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	return c
}

// stop sends SIGTERM and fails t unless the child exits 0 within a minute.
func (c *child) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.exited:
		if err != nil {
			t.Fatalf("%s exited with %v after SIGTERM; logs:\n%s", c.name, err, c.logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit after SIGTERM; logs:\n%s", c.name, c.logs)
	}
}
