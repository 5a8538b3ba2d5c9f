package dispatch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// process is one running stage program and its I/O goroutines. Only the
// goroutines started here touch its pipes; the loop talks to it through
// feed and signal, and hears from it through events.
type process struct {
	cmd   *exec.Cmd
	pid   int
	stdin *os.File
	feed  chan []byte // buffers of ids for the writer; closed to close stdin
}

// spawnSpec is what starting a stage program needs.
type spawnSpec struct {
	argv   []string // program and arguments, -c CONFIG_FILE included
	env    []string
	stage  string
	log    *slog.Logger
	obs    Observer // hears of stderr lines dropped or cut
	events chan<- event
	feed   int // capacity of the feed channel: more than the writes that can be outstanding
}

// startProcess starts argv in its own process group with its stdin, stdout
// and stderr on pipes, and the goroutines that serve them.
func startProcess(w *worker, spec spawnSpec) (*process, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Env = spec.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, err
	}
	closeAll(inR, outW, errW) // the child has its copies
	p := &process{cmd: cmd, pid: cmd.Process.Pid, stdin: inW, feed: make(chan []byte, spec.feed)}
	log := spec.log.With("stage", spec.stage, "pid", p.pid)
	out, errs := &exitPipe{f: outR}, &exitPipe{f: errR}
	readDone, relayDone := make(chan struct{}), make(chan struct{})
	go p.write()
	go func() {
		defer close(relayDone)
		newStderrRelay(log, spec.stage, spec.obs, time.Now).run(errs)
	}()
	go func() {
		defer close(readDone)
		readAnswers(out, w, spec.events)
	}()
	go func() {
		// The exit is the process's, not the end of its pipes: a process
		// it started in a session of its own (setsid) is out of reach of
		// the kill of its group and may hold them open for ever.
		err := cmd.Wait()
		// Whatever the program left behind in its group goes with it.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		// Its pipes are read to what they hold, then let go; a write to
		// its stdin that such a process holds and does not read ends.
		out.exited()
		errs.exited()
		_ = p.stdin.SetWriteDeadline(time.Unix(1, 0))
		<-readDone
		<-relayDone
		if out.held || errs.held {
			// Out of reach of the kill of its group (setsid): its output
			// is no longer read, and it may live on.
			log.Warn("worker exited; a process it left behind holds its stdout or stderr open")
		}
		spec.events <- event{kind: evExit, w: w, err: err}
	}()
	return p, nil
}

// exitDrain bounds what is read of a pipe once its worker has exited: a
// process that holds it may keep writing. It is the largest pipe buffer
// an unprivileged process may ask for (/proc/sys/fs/pipe-max-size), so
// all that the worker wrote before it exited is read.
const exitDrain = 1 << 20

// exitPipe is the read end of a worker's stdout or stderr. It reads as
// the file does until the worker has exited; from then on it takes what
// the pipe already holds without waiting, and then ends as at EOF,
// whoever else still holds the write end. Only its reader goroutine reads
// it; exited may be called from another.
type exitPipe struct {
	f     *os.File
	after bool // the worker has exited: reading what is left
	left  int  // bytes that may still be read after the exit
	held  bool // the end came with the write end still open
}

// Read reads the pipe; see exitPipe.
func (p *exitPipe) Read(b []byte) (int, error) {
	if !p.after {
		n, err := p.f.Read(b)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		p.after, p.left = true, exitDrain
	}
	if p.left <= 0 {
		p.held = true
		return 0, io.EOF
	}
	// The deadline has passed, so the file's Read fails at once: read the
	// descriptor itself, which the poller keeps non-blocking.
	rc, err := p.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			n, rerr = syscall.Read(int(fd), b[:min(len(b), p.left)])
			if !errors.Is(rerr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	switch {
	case errors.Is(rerr, syscall.EAGAIN):
		p.held = true // empty, and a writer is left
		return 0, io.EOF
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	p.left -= n
	return n, nil
}

// exited makes reads stop waiting for more: the worker has exited.
func (p *exitPipe) exited() { _ = p.f.SetReadDeadline(time.Unix(1, 0)) }

// Close closes the pipe.
func (p *exitPipe) Close() error { return p.f.Close() }

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// write copies id buffers to the program's stdin, one write each, and
// closes stdin when feed is closed. A failed write is not reported: the
// program is gone and its exit event says so.
func (p *process) write() {
	broken := false
	for buf := range p.feed {
		if !broken {
			if _, err := p.stdin.Write(buf); err != nil {
				broken = true
			}
		}
	}
	p.stdin.Close()
}

// signal sends sig to the program's process group.
func (p *process) signal(sig syscall.Signal) {
	if p.pid <= 1 {
		// Never a process of ours: kill(-1) would signal every process
		// there is, kill(-0) our own group.
		return
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// maxBatch bounds how many status lines one event carries.
const maxBatch = 128

// answerBuf is the size of a worker's stdout buffer: status lines are
// short, and a longer one (up to protocol.MaxLine) is put together apart,
// so that 64 workers do not keep 64 KiB each.
const answerBuf = 4 << 10

// readAnswers parses status lines from the program's stdout and reports
// them in batches of what is already buffered, then reports the end of
// stdout. A protocol error ends reading. A hello line, as the first line,
// is reported on its own (evHello).
func readAnswers(r io.ReadCloser, w *worker, events chan<- event) {
	defer r.Close()
	br := bufio.NewReaderSize(r, answerBuf)
	var batch []protocol.Status
	for first := true; ; first = false {
		line, err := readLine(br)
		if err != nil {
			if len(batch) > 0 {
				events <- event{kind: evAnswers, w: w, answers: batch}
			}
			if ep, ok := r.(*exitPipe); ok && ep.after && errors.Is(err, io.EOF) {
				// The end came with the exit, whose event follows: there
				// is no process left to stop for closing its stdout.
				return
			}
			if errors.Is(err, io.EOF) {
				events <- event{kind: evEOF, w: w}
			} else {
				events <- event{kind: evProtocol, w: w, err: err}
			}
			return
		}
		if h, ok := protocol.ParseHello(line); ok && first {
			switch {
			case h.Trace:
				events <- event{kind: evHelloTrace, w: w, err: helloNoToken(h)}
			case h.Token:
				events <- event{kind: evHello, w: w}
			}
			continue
		}
		st, perr := protocol.Parse(line)
		if perr != nil {
			if len(batch) > 0 {
				events <- event{kind: evAnswers, w: w, answers: batch}
			}
			events <- event{kind: evProtocol, w: w, err: perr}
			_, _ = io.Copy(io.Discard, br)
			return
		}
		batch = append(batch, st)
		if len(batch) >= maxBatch || !hasLine(br) {
			events <- event{kind: evAnswers, w: w, answers: batch}
			batch = nil
		}
	}
}

// errLongLine reports a status line over protocol.MaxLine.
var errLongLine = fmt.Errorf("status line longer than %d bytes", protocol.MaxLine)

// readLine returns the next line without its newline (or CR LF), valid
// until the next read. A final line without a newline is returned as a
// line; a line over protocol.MaxLine is an error.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// Longer than the buffer: put together (rare, and allowed up to
		// MaxLine plus CR LF).
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) && len(long) <= protocol.MaxLine+1 {
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		if errors.Is(err, bufio.ErrBufferFull) || len(long) > protocol.MaxLine+2 {
			return nil, errLongLine
		}
		line = long
	}
	switch {
	case err == nil:
		return bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'}), nil
	case errors.Is(err, io.EOF) && len(line) > 0:
		return line, nil
	}
	return nil, err
}

// hasLine reports whether a whole line is already buffered.
func hasLine(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := br.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}
