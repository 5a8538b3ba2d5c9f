package otlp

import (
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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

// stub returns p's span, with resource res and scope: what the SDK's span
// processors take, made without a tracer (the ids, the times and the
// sampling are decided already).
func (p *Pass) stub(res *resource.Resource, scope instrumentation.Scope) sdktrace.ReadOnlySpan {
	// Each attribute costs the export about a tenth of the span: a value
	// another attribute or the name already gives, or a default, is left
	// out (the stage is messaging.destination.name; priority 0 is none).
	attrs := make([]attribute.KeyValue, 0, 13)
	attrs = append(attrs,
		attribute.String(attrSystem, "pepsi"),
		attribute.String(attrOp, "process"),
		attribute.String(attrDest, p.Stage),
		attribute.String(attrMsgID, strconv.FormatInt(p.ID, 10)),
		attribute.Int(attrAttempt, int(p.Attempt)),
		attribute.Float64(attrWait, p.Waited),
		attribute.String(attrResult, p.Result),
	)
	if p.Priority != 0 {
		attrs = append(attrs, attribute.Int(attrPriority, int(p.Priority)))
	}
	if p.Keyed {
		attrs = append(attrs, attribute.String(attrKey, p.Key))
	}
	if p.Move != "" {
		attrs = append(attrs, attribute.String(attrMove, p.Move))
	}
	if p.Next != "" {
		attrs = append(attrs, attribute.String(attrNext, p.Next))
	}
	if p.PID != 0 {
		attrs = append(attrs, attribute.Int(attrPID, p.PID))
	}
	if p.Reason != "" {
		attrs = append(attrs, attribute.String(attrReason, p.Reason))
	}
	s := tracetest.SpanStub{Name: Name(p.Stage), SpanContext: p.Span, SpanKind: trace.SpanKindConsumer,
		StartTime: p.Start, EndTime: p.End, Attributes: attrs, Resource: res, InstrumentationScope: scope}
	if p.Parent.IsValid() {
		if p.Link {
			s.Links = []sdktrace.Link{{SpanContext: p.Parent}}
		} else {
			s.Parent = p.Parent
		}
	}
	switch p.Result {
	case "ok", "notrun":
	default:
		s.Status = sdktrace.Status{Code: codes.Error, Description: p.Reason}
	}
	return s.Snapshot()
}
