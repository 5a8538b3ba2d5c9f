// Package trace holds the W3C trace context a message carries in its
// headers and a pass's id line carries to its stage. It needs only the
// OpenTelemetry API; the export of spans is pkg/trace/otlp's.
package trace

import (
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// The message headers that carry a message's trace context: the W3C
// Trace Context header names, so that a producer copies its HTTP
// request's headers over as they are.
const (
	HeaderParent = "traceparent"
	HeaderState  = "tracestate"
)

// EnvParent and EnvState are the environment variables pepsi enqueue
// reads a trace context from, as OpenTelemetry's environment carrier
// names them.
const (
	EnvParent = "TRACEPARENT"
	EnvState  = "TRACESTATE"
)

// tpLen is the length of a version 00 traceparent.
const tpLen = 55

// Parse parses a W3C traceparent, and a tracestate that may be empty, into
// a remote span context; ok is false for a malformed traceparent (a bad
// tracestate is dropped, as the W3C rules say).
func Parse(traceparent, tracestate string) (trace.SpanContext, bool) {
	tp := traceparent
	if len(tp) < tpLen || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	var ver [1]byte
	if !unhex(ver[:], tp[0:2]) || ver[0] == 0xff || (ver[0] == 0 && len(tp) != tpLen) ||
		(len(tp) > tpLen && tp[tpLen] != '-') {
		return trace.SpanContext{}, false
	}
	var c trace.SpanContextConfig
	var flags [1]byte
	if !unhex(c.TraceID[:], tp[3:35]) || !unhex(c.SpanID[:], tp[36:52]) || !unhex(flags[:], tp[53:55]) {
		return trace.SpanContext{}, false
	}
	c.TraceFlags = trace.TraceFlags(flags[0]) & trace.FlagsSampled
	c.Remote = true
	if tracestate != "" {
		if ts, err := trace.ParseTraceState(tracestate); err == nil {
			c.TraceState = ts
		}
	}
	sc := trace.NewSpanContext(c)
	return sc, sc.IsValid()
}

// unhex decodes lower-case hex s into dst, which it fills exactly.
func unhex(dst []byte, s string) bool {
	if len(s) != 2*len(dst) || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

// AppendParent appends sc's traceparent to b.
func AppendParent(b []byte, sc trace.SpanContext) []byte {
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	if sc.IsSampled() {
		return append(b, "-01"...)
	}
	return append(b, "-00"...)
}

// Parent returns sc's traceparent.
func Parent(sc trace.SpanContext) string { return string(AppendParent(make([]byte, 0, tpLen), sc)) }

// Split splits what the traced claim reads of a message's headers, its
// traceparent and its tracestate joined by a blank, into the two.
func Split(s string) (traceparent, tracestate string) {
	tp, ts, _ := strings.Cut(s, " ")
	return tp, ts
}
