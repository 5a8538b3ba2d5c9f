package otlp

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestEncode: the encoder's spans, read back by OTLP's own protobuf types,
// say what the pass recorded: ids, parent or link, trace state, flags,
// times, kind, status and every attribute.
func TestEncode(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	start := time.Unix(1700000000, 123456789)
	child := Pass{Stage: "resize", Parent: parent, Start: start, End: start.Add(1500 * time.Microsecond),
		Span: trace.NewSpanContext(trace.SpanContextConfig{TraceID: parent.TraceID(), SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled, TraceState: ts}),
		ID:   1234567890123, Attempt: 3, Priority: -2, Key: "order-7", Keyed: true, Waited: 0.25,
		Result: "timeout", Move: "retry", Reason: "stage resize took longer than MAX_RUNTIME", PID: 4321}
	link := Pass{Stage: "store", Parent: parent, Link: true, Start: start, End: start,
		Span: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}}),
		ID:   5, Attempt: 1, Result: "ok", Move: "advance", Next: "done"}
	var e encoder
	var b []byte
	b = e.appendSpan(b, &child)
	b = e.appendSpan(b, &link)
	var ss tracepb.ScopeSpans
	if err := proto.Unmarshal(b, &ss); err != nil {
		t.Fatalf("the encoder's output does not parse as ScopeSpans: %v", err)
	}
	if len(ss.Spans) != 2 {
		t.Fatalf("%d spans, want 2", len(ss.Spans))
	}
	c, l := ss.Spans[0], ss.Spans[1]
	sid := child.Span.SpanID()
	psid := parent.SpanID()
	tid := parent.TraceID()
	check := func(what string, got, want any) {
		t.Helper()
		if !equal(got, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("trace id", c.TraceId, tid[:])
	check("span id", c.SpanId, sid[:])
	check("parent span id", c.ParentSpanId, psid[:])
	check("trace state", c.TraceState, "vendor=x")
	check("name", c.Name, "process resize")
	check("kind", c.Kind, tracepb.Span_SPAN_KIND_CONSUMER)
	check("start", c.StartTimeUnixNano, uint64(start.UnixNano()))
	check("end", c.EndTimeUnixNano, uint64(child.End.UnixNano()))
	check("flags", c.Flags, uint32(0x301))
	check("status code", c.Status.GetCode(), tracepb.Status_STATUS_CODE_ERROR)
	check("status message", c.Status.GetMessage(), child.Reason)
	got := map[string]any{}
	for _, kv := range c.Attributes {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			got[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			got[kv.Key] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			got[kv.Key] = v.DoubleValue
		default:
			t.Errorf("attribute %s: a value of %T", kv.Key, v)
		}
	}
	want := map[string]any{attrSystem: "pepsi", attrOp: "process", attrDest: "resize", attrMsgID: "1234567890123",
		attrAttempt: int64(3), attrWait: 0.25, attrResult: "timeout", attrPriority: int64(-2), attrKey: "order-7",
		attrMove: "retry", attrReason: child.Reason, attrPID: int64(4321)}
	check("attributes", len(got), len(want))
	for k, v := range want {
		check("attribute "+k, got[k], v)
	}
	// TRACE = link: a root of its own trace, linking to the message's context.
	lsid := link.Span.SpanID()
	check("link's span id", l.SpanId, lsid[:])
	check("link's parent", len(l.ParentSpanId), 0)
	check("link's flags", l.Flags, uint32(0x100))
	check("link's status", l.Status.GetCode(), tracepb.Status_STATUS_CODE_UNSET)
	if len(l.Links) != 1 {
		t.Fatalf("%d links, want 1", len(l.Links))
	}
	check("link trace id", l.Links[0].TraceId, tid[:])
	check("link span id", l.Links[0].SpanId, psid[:])
	check("link trace state", l.Links[0].TraceState, "vendor=x")
	check("link flags", l.Links[0].Flags, uint32(0x301))
}

func equal(a, b any) bool {
	if x, ok := a.([]byte); ok {
		y, _ := b.([]byte)
		return string(x) == string(y)
	}
	return a == b
}

// BenchmarkEncode is one pass span's encoding, the export goroutine's
// share of a span before the HTTP request.
func BenchmarkEncode(b *testing.B) {
	now := time.Now()
	p := Pass{Stage: "resize", Start: now, End: now.Add(time.Millisecond), ID: 42, Attempt: 1, Waited: 0.01,
		Result: "ok", Move: "advance", Next: "store", PID: 1234,
		Span: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})}
	var e encoder
	var buf []byte
	b.ReportAllocs()
	for range b.N {
		buf = e.appendSpan(buf[:0], &p)
	}
}
