package otlp

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestSamplerFromEnv(t *testing.T) {
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	low, high := trace.TraceID{15: 1}, trace.TraceID{8: 0xff, 15: 0xff}
	for _, c := range []struct {
		name, arg           string
		parentOn, parentOff bool // a child of a sampled, an unsampled parent
		rootLow, rootHigh   bool // a root with a low, a high trace id
	}{
		{"", "", true, false, true, true},
		{"always_on", "", true, true, true, true},
		{"always_off", "", false, false, false, false},
		{"parentbased_always_off", "", true, false, false, false},
		{"traceidratio", "0.5", true, true, true, false},
		{"parentbased_traceidratio", "0.5", true, false, true, false},
		{"traceidratio", "1", true, true, true, true},
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", c.name)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
		s, err := samplerFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		got := [4]bool{s.sampled(sampled, low), s.sampled(unsampled, low), s.sampled(trace.SpanContext{}, low), s.sampled(trace.SpanContext{}, high)}
		if want := [4]bool{c.parentOn, c.parentOff, c.rootLow, c.rootHigh}; got != want {
			t.Errorf("%s %s: %v, want %v", c.name, c.arg, got, want)
		}
	}
	for _, bad := range [][2]string{{"jaeger_remote", ""}, {"traceidratio", "2"}, {"traceidratio", "x"}} {
		t.Setenv("OTEL_TRACES_SAMPLER", bad[0])
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", bad[1])
		if _, err := samplerFromEnv(); err == nil {
			t.Errorf("%s %s accepted", bad[0], bad[1])
		}
	}
}
