package main

// The dispatchers the soak runs, and the test workers they start.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// proc is a running `pepsi dispatch`.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

func (s *soak) startDispatcher(standby bool) *proc {
	s.seq++
	args := []string{"-c", s.conf, "dispatch"}
	if standby {
		args = append(args, "--standby")
	}
	p := &proc{log: filepath.Join(s.dir, fmt.Sprintf("dispatch-%02d.log", s.seq)), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		panic(err)
	}
	p.cmd = exec.Command(*pepsiFlag, args...)
	p.cmd.Stderr = f
	p.cmd.Env = append(os.Environ(), "PEPSI_DSN="+s.dsn)
	if err := p.cmd.Start(); err != nil {
		panic(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p
}

func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitLog waits until the process's log has n lines containing what.
func (p *proc) waitLog(what string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		data, _ := os.ReadFile(p.log)
		if strings.Count(string(data), what) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q after %v", p.log, what, timeout)
		}
		if p.done() {
			return fmt.Errorf("%s: exited (%v) before %q", p.log, p.err, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop signals the process and waits for it; it returns the exit status
// (-1 when killed by a signal).
func (p *proc) stop(sig syscall.Signal) int {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return p.cmd.ProcessState.ExitCode()
}

// liveWorkers returns the pids of the test workers still running.
func (s *soak) liveWorkers() []int {
	rows, err := s.conn.Query(s.ctx, "SELECT pid FROM test_workers")
	if err != nil {
		s.reconnect()
		return nil
	}
	pids, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
	var live []int
	worker := filepath.Base(*workerFlag)
	for _, pid := range pids {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmdline), worker) && !zombie(int(pid)) {
			live = append(live, int(pid))
		}
	}
	return live
}

// parent returns the parent pid of pid (0 if unknown).
func parent(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:])) // state ppid ...
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}

// killWorkers kills what is left of the test workers: the hung workers of
// killed dispatchers, which nothing else stops.
func (s *soak) killWorkers() {
	pids := s.liveWorkers()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	s.orphans = len(pids)
}
