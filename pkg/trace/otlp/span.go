package otlp

import (
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Pass is one pass of a message through a stage, as the dispatcher
// recorded it: the values its span is made of, off the dispatcher's loop.
type Pass struct {
	Stage  string
	Span   trace.SpanContext // the pass's own (Exporter.Begin)
	Parent trace.SpanContext // the message's trace context; not valid: none
	Link   bool              // the pass links to Parent instead of being its child
	Start  time.Time         // handed to the worker
	End    time.Time         // answered, or given up

	ID       int64
	Attempt  int32
	Priority int32
	Key      string
	Keyed    bool
	Waited   float64 // seconds pending before the claim

	Result string // ok, failed, crash, timeout, protocol, notrun
	Move   string // advance, finish, pause, join, retry, fail; "" when the stage moved the message itself
	Next   string // the stage advanced or joined to
	Reason string // why the pass failed
	PID    int    // the worker's process id

	Retries int // the stage's RETRIES: a failed pass within them is retried (not exported)
}

// Span kinds and names of the pass span's attributes: OpenTelemetry's
// messaging conventions, and pepsi's own.
const (
	attrSystem   = "messaging.system"
	attrOp       = "messaging.operation.type"
	attrDest     = "messaging.destination.name"
	attrMsgID    = "messaging.message.id"
	attrAttempt  = "pepsi.attempt"
	attrPriority = "pepsi.priority"
	attrKey      = "pepsi.key"
	attrWait     = "pepsi.wait_seconds"
	attrResult   = "pepsi.result"
	attrMove     = "pepsi.move"
	attrNext     = "pepsi.next"
	attrReason   = "pepsi.failure.reason"
	attrPID      = "pepsi.worker.pid"
)

// Name is the name of a pass span at stage: "process STAGE", as the
// messaging conventions name a consumer's span.
func Name(stage string) string { return "process " + stage }
