package otlp

import (
	"math"
	"strconv"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The field numbers of OTLP's trace protobuf (opentelemetry/proto/trace/v1)
// that a pass span uses.
const (
	spanTraceID      = 1
	spanSpanID       = 2
	spanTraceState   = 3
	spanParentSpanID = 4
	spanName         = 5
	spanKind         = 6
	spanStart        = 7
	spanEnd          = 8
	spanAttributes   = 9
	spanLinks        = 13
	spanStatus       = 15
	spanFlags        = 16

	linkTraceID    = 1
	linkSpanID     = 2
	linkTraceState = 3
	linkFlags      = 6

	statusMessage = 2
	statusCode    = 3

	kvKey   = 1
	kvValue = 2

	anyString = 1
	anyInt    = 3
	anyDouble = 4

	scopeSpansSpans = 2 // ScopeSpans.spans: what appendSpan's output is a field of

	kindConsumer = 5 // SPAN_KIND_CONSUMER
	codeError    = 2 // STATUS_CODE_ERROR

	flagsHasIsRemote = 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	flagsIsRemote    = 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)

// encoder writes pass spans as OTLP protobuf, each a ScopeSpans.spans
// field, into a buffer it reuses: what the SDK's conversion and
// marshalling would make of the span, without a message per field.
type encoder struct {
	body []byte // one span's message, before its length is known
}

// appendSpan appends p to b as field 2 (spans) of a ScopeSpans message.
func (e *encoder) appendSpan(b []byte, p *Pass) []byte {
	s := e.body[:0]
	tid, sid := p.Span.TraceID(), p.Span.SpanID()
	s = appendBytesField(s, spanTraceID, tid[:])
	s = appendBytesField(s, spanSpanID, sid[:])
	if ts := p.Span.TraceState().String(); ts != "" {
		s = appendStringField(s, spanTraceState, ts)
	}
	child := p.Parent.IsValid() && !p.Link
	if child {
		psid := p.Parent.SpanID()
		s = appendBytesField(s, spanParentSpanID, psid[:])
	}
	s = protowire.AppendTag(s, spanName, protowire.BytesType)
	s = protowire.AppendVarint(s, uint64(len("process ")+len(p.Stage)))
	s = append(s, "process "...)
	s = append(s, p.Stage...)
	s = protowire.AppendTag(s, spanKind, protowire.VarintType)
	s = protowire.AppendVarint(s, kindConsumer)
	s = protowire.AppendTag(s, spanStart, protowire.Fixed64Type)
	s = protowire.AppendFixed64(s, uint64(p.Start.UnixNano()))
	s = protowire.AppendTag(s, spanEnd, protowire.Fixed64Type)
	s = protowire.AppendFixed64(s, uint64(p.End.UnixNano()))
	s = p.appendAttributes(s)
	if p.Parent.IsValid() && p.Link {
		s = appendLink(s, p.Parent)
	}
	switch p.Result {
	case "ok", "notrun":
	default:
		st := protowire.SizeTag(statusCode) + protowire.SizeVarint(codeError)
		if p.Reason != "" {
			st += protowire.SizeTag(statusMessage) + protowire.SizeBytes(len(p.Reason))
		}
		s = protowire.AppendTag(s, spanStatus, protowire.BytesType)
		s = protowire.AppendVarint(s, uint64(st))
		if p.Reason != "" {
			s = appendStringField(s, statusMessage, p.Reason)
		}
		s = protowire.AppendTag(s, statusCode, protowire.VarintType)
		s = protowire.AppendVarint(s, codeError)
	}
	var parent trace.SpanContext
	if child {
		parent = p.Parent
	}
	s = protowire.AppendTag(s, spanFlags, protowire.Fixed32Type)
	s = protowire.AppendFixed32(s, spanFlagsOf(p.Span.TraceFlags(), parent))
	e.body = s
	return appendBytesField(b, scopeSpansSpans, s)
}

// appendAttributes appends p's attributes: the messaging conventions' and
// pepsi's own. Each costs the export about a tenth of the span, so a
// value another attribute or the name already gives, or a default, is
// left out (the stage is messaging.destination.name; priority 0 is none).
func (p *Pass) appendAttributes(s []byte) []byte {
	var num [20]byte
	s = append(s, fixedAttrs...)
	s = appendStringAttr(s, attrDest, p.Stage)
	s = appendDigitsAttr(s, attrMsgID, strconv.AppendInt(num[:0], p.ID, 10))
	s = appendIntAttr(s, attrAttempt, int64(p.Attempt))
	s = appendDoubleAttr(s, attrWait, p.Waited)
	s = appendStringAttr(s, attrResult, p.Result)
	if p.Priority != 0 {
		s = appendIntAttr(s, attrPriority, int64(p.Priority))
	}
	if p.Keyed {
		s = appendStringAttr(s, attrKey, p.Key)
	}
	if p.Move != "" {
		s = appendStringAttr(s, attrMove, p.Move)
	}
	if p.Next != "" {
		s = appendStringAttr(s, attrNext, p.Next)
	}
	if p.PID != 0 {
		s = appendIntAttr(s, attrPID, int64(p.PID))
	}
	if p.Reason != "" {
		s = appendStringAttr(s, attrReason, p.Reason)
	}
	return s
}

// fixedAttrs are the attributes every pass span has with the same value.
var fixedAttrs = appendStringAttr(appendStringAttr(nil, attrSystem, "pepsi"), attrOp, "process")

// spanFlagsOf is a span's or link's flags field: the W3C trace flags, and
// whether its parent (or the linked span) is remote, as the SDK's
// exporter writes them.
func spanFlagsOf(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagsHasIsRemote
	if parent.IsRemote() {
		f |= flagsIsRemote
	}
	return f
}

// appendLink appends a link to sc (the message's context, TRACE = link).
func appendLink(s []byte, sc trace.SpanContext) []byte {
	tid, sid := sc.TraceID(), sc.SpanID()
	ts := sc.TraceState().String()
	n := protowire.SizeTag(linkTraceID) + protowire.SizeBytes(len(tid)) +
		protowire.SizeTag(linkSpanID) + protowire.SizeBytes(len(sid)) +
		protowire.SizeTag(linkFlags) + protowire.SizeFixed32()
	if ts != "" {
		n += protowire.SizeTag(linkTraceState) + protowire.SizeBytes(len(ts))
	}
	s = protowire.AppendTag(s, spanLinks, protowire.BytesType)
	s = protowire.AppendVarint(s, uint64(n))
	s = appendBytesField(s, linkTraceID, tid[:])
	s = appendBytesField(s, linkSpanID, sid[:])
	if ts != "" {
		s = appendStringField(s, linkTraceState, ts)
	}
	s = protowire.AppendTag(s, linkFlags, protowire.Fixed32Type)
	return protowire.AppendFixed32(s, spanFlagsOf(sc.TraceFlags(), sc))
}

// appendStringAttr appends the attribute key = v (a KeyValue of a string).
func appendStringAttr(s []byte, key, v string) []byte {
	val := protowire.SizeTag(anyString) + protowire.SizeBytes(len(v))
	s = appendKey(s, key, val)
	return appendStringField(s, anyString, v)
}

// appendDigitsAttr appends the attribute key = v (a KeyValue of a string
// given as bytes, as strconv.AppendInt writes a number).
func appendDigitsAttr(s []byte, key string, v []byte) []byte {
	val := protowire.SizeTag(anyString) + protowire.SizeBytes(len(v))
	s = appendKey(s, key, val)
	return appendBytesField(s, anyString, v)
}

// appendIntAttr appends the attribute key = v (a KeyValue of an int).
func appendIntAttr(s []byte, key string, v int64) []byte {
	val := protowire.SizeTag(anyInt) + protowire.SizeVarint(uint64(v))
	s = appendKey(s, key, val)
	s = protowire.AppendTag(s, anyInt, protowire.VarintType)
	return protowire.AppendVarint(s, uint64(v))
}

// appendDoubleAttr appends the attribute key = v (a KeyValue of a double).
func appendDoubleAttr(s []byte, key string, v float64) []byte {
	val := protowire.SizeTag(anyDouble) + protowire.SizeFixed64()
	s = appendKey(s, key, val)
	s = protowire.AppendTag(s, anyDouble, protowire.Fixed64Type)
	return protowire.AppendFixed64(s, math.Float64bits(v))
}

// appendKey starts an attribute: its KeyValue's tag and length, its key,
// and its AnyValue's tag and length (val), which the caller's value fills.
func appendKey(s []byte, key string, val int) []byte {
	kv := protowire.SizeTag(kvKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(kvValue) + protowire.SizeBytes(val)
	s = protowire.AppendTag(s, spanAttributes, protowire.BytesType)
	s = protowire.AppendVarint(s, uint64(kv))
	s = appendStringField(s, kvKey, key)
	s = protowire.AppendTag(s, kvValue, protowire.BytesType)
	return protowire.AppendVarint(s, uint64(val))
}

func appendBytesField(s []byte, n protowire.Number, v []byte) []byte {
	s = protowire.AppendTag(s, n, protowire.BytesType)
	return protowire.AppendBytes(s, v)
}

func appendStringField(s []byte, n protowire.Number, v string) []byte {
	s = protowire.AppendTag(s, n, protowire.BytesType)
	return protowire.AppendString(s, v)
}
