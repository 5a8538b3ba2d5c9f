package dispatch

import (
	"errors"
	"io"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Result is how one stage pass ended.
type Result string

// The results of a stage pass.
const (
	ResultOK       Result = "ok"       // answered 0
	ResultFailed   Result = "failed"   // answered non-zero
	ResultTimeout  Result = "timeout"  // unanswered within MAX_RUNTIME
	ResultCrash    Result = "crash"    // the worker died with it outstanding
	ResultProtocol Result = "protocol" // the worker broke the protocol
)

// Observer hears what the dispatcher does, for metrics. Its methods are
// called from the dispatcher's loop and must return quickly.
type Observer interface {
	// Handed: a message was handed to a worker of stage after waiting
	// pending for waited.
	Handed(stage string, waited time.Duration)
	// Passed: a pass of stage ended with result after busy.
	Passed(stage string, result Result, busy time.Duration)
	// WorkerStarted and WorkerStartFailed: a worker of stage started, or
	// its PROGRAM could not start.
	WorkerStarted(stage string)
	WorkerStartFailed(stage string)
	// Pool: stage has workers processes and inflight messages handed out.
	Pool(stage string, workers, inflight int)
	// Reconnect: a database connection failed for reason and is being
	// re-made (conn ConnListener) or its statement retried after a backoff
	// (conn ConnQueue).
	Reconnect(conn, reason string)
	// OrphansRescued: n running rows no worker held were reset.
	OrphansRescued(n int64)
	// Health: whether this dispatcher holds the lock and its listener is connected.
	Health(ok bool)
}

// The connections Reconnect names.
const (
	ConnListener = "listener" // the session that holds the lock and LISTENs
	ConnQueue    = "queue"    // the pool that runs claims, settles, sweeps and flushes
)

// nopObserver is the Observer when none is given.
type nopObserver struct{}

func (nopObserver) Handed(string, time.Duration)         {}
func (nopObserver) Passed(string, Result, time.Duration) {}
func (nopObserver) WorkerStarted(string)                 {}
func (nopObserver) WorkerStartFailed(string)             {}
func (nopObserver) Pool(string, int, int)                {}
func (nopObserver) Reconnect(string, string)             {}
func (nopObserver) OrphansRescued(int64)                 {}
func (nopObserver) Health(bool)                          {}

// reason names the kind of a connection failure for Observer.Reconnect.
func reason(err error) string {
	code, isPg := queue.SQLState(err)
	switch {
	case queue.IsReadOnly(err):
		return "read_only"
	case queue.IsServerShutdown(err):
		return "server_shutdown"
	case isPg:
		return "error_" + code
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	}
	return "network"
}
