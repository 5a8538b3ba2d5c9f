package dispatch

import (
	"errors"
	"io"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
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
	ResultNotRun   Result = "not_run"  // answered 75: no pass was made, no attempt counted
)

// Observer hears what the dispatcher does, for metrics. Its methods are
// called from the dispatcher's loop, except StderrDropped, and must return
// quickly.
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
	// ListenerReconnect: the listener session (the one that holds the
	// lock and LISTENs) failed for reason and is being re-made.
	ListenerReconnect(reason string)
	// QueueRetry: a queue statement (a claim, settle, sweep or flush)
	// failed for reason and is retried after a backoff (one refused by
	// the fence because the lock session died is the listener's reconnect).
	QueueRetry(reason string)
	// OrphansRescued: n running rows no worker held were reset.
	OrphansRescued(n int64)
	// Health: whether this dispatcher holds the lock and its listener is connected.
	Health(ok bool)
	// StderrDropped: a worker of stage wrote lines to stderr faster than
	// the log relays them (lines, dropped whole) or longer than a relayed
	// line may be (bytes, cut off their ends). It is called from the
	// worker's stderr goroutine, concurrently with the other methods.
	StderrDropped(stage string, lines, bytes int64)
}

// The reasons ListenerReconnect and QueueRetry give; any other error the
// server reports is "error_" and its SQLSTATE.
const (
	ReasonReadOnly       = "read_only"       // the server is a read-only standby
	ReasonServerShutdown = "server_shutdown" // the server is shutting down or restarting (SQLSTATE 57P01-57P03)
	ReasonClosed         = "closed"          // the connection was closed under it
	ReasonNetwork        = "network"         // anything else: the server could not be reached
)

// nopObserver is the Observer when none is given.
type nopObserver struct{}

func (nopObserver) Handed(string, time.Duration)         {}
func (nopObserver) Passed(string, Result, time.Duration) {}
func (nopObserver) WorkerStarted(string)                 {}
func (nopObserver) WorkerStartFailed(string)             {}
func (nopObserver) Pool(string, int, int)                {}
func (nopObserver) ListenerReconnect(string)             {}
func (nopObserver) QueueRetry(string)                    {}
func (nopObserver) OrphansRescued(int64)                 {}
func (nopObserver) Health(bool)                          {}
func (nopObserver) StderrDropped(string, int64, int64)   {}

// reason names the kind of a database failure for Observer.ListenerReconnect
// and Observer.QueueRetry.
func reason(err error) string {
	code, isPg := pgerr.SQLState(err)
	switch {
	case queue.IsReadOnly(err):
		return ReasonReadOnly
	case pgerr.IsServerShutdown(err):
		return ReasonServerShutdown
	case isPg:
		return "error_" + code
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonClosed
	}
	return ReasonNetwork
}
