package otlp

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// sampler decides whether a pass is sampled, when it is handed out: its
// traceparent goes to the stage on the id line, flags included, before
// the span is made. It reads OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG as the SDK does; only sampled spans reach the
// SDK.
type sampler struct {
	parentBased bool   // a pass with a parent follows its parent's decision
	bound       uint64 // a root is sampled when its trace id's low 63 bits are below this
	all         bool   // every root is sampled
}

// samplerFromEnv returns the sampler the environment names (the SDK's
// default, parentbased_always_on, when it names none).
func samplerFromEnv() (sampler, error) {
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	s := sampler{parentBased: true, all: true}
	ratio := func() error {
		r := 1.0
		if arg != "" {
			var err error
			if r, err = strconv.ParseFloat(arg, 64); err != nil || r < 0 || r > 1 {
				return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
			}
		}
		s.all = r >= 1
		s.bound = uint64(r * (1 << 63))
		return nil
	}
	switch name {
	case "", "parentbased_always_on":
	case "always_on":
		s.parentBased = false
	case "always_off":
		s.parentBased, s.all = false, false
	case "parentbased_always_off":
		s.all = false
	case "traceidratio":
		s.parentBased = false
		return s, ratio()
	case "parentbased_traceidratio":
		return s, ratio()
	default:
		return s, fmt.Errorf("OTEL_TRACES_SAMPLER %q: pepsi knows always_on, always_off, traceidratio and their parentbased_ forms", name)
	}
	return s, nil
}

// sampled decides for a span of trace tid whose parent is parent (not
// valid: a root).
func (s sampler) sampled(parent trace.SpanContext, tid trace.TraceID) bool {
	if s.parentBased && parent.IsValid() {
		return parent.IsSampled()
	}
	if s.all {
		return true
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < s.bound
}
