package worker

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/trace"

	ptrace "github.com/pepsi-dev/pepsi/pkg/trace"
)

// withPassSpan returns ctx carrying the span context of m's pass, as a
// remote parent, when the dispatcher sent one.
func withPassSpan(ctx context.Context, m *Message) context.Context {
	if m.Traceparent == "" {
		return ctx
	}
	sc, ok := ptrace.Parse(m.Traceparent, "")
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// traceHeaders returns a child's headers: o's, with the traceparent and
// tracestate of the span ctx carries when o has no traceparent; nil for
// none at all.
func traceHeaders(ctx context.Context, o *SpawnOptions) map[string]string {
	var h map[string]string
	if o != nil && len(o.Headers) > 0 {
		h = o.Headers
	}
	sc := trace.SpanContextFromContext(ctx)
	if _, own := h[ptrace.HeaderParent]; own || !sc.IsValid() {
		return h
	}
	h = maps.Clone(h)
	if h == nil {
		h = make(map[string]string, 2)
	}
	h[ptrace.HeaderParent] = ptrace.Parent(sc)
	if ts := sc.TraceState().String(); ts != "" {
		h[ptrace.HeaderState] = ts
	}
	return h
}
