// Command tracestage is a pkg/worker stage program for tracing tests: each
// pass starts a span of its own, "work", from the ctx pkg/worker gives it
// (so it nests under the dispatcher's pass span), exported over OTLP/HTTP
// as the OTEL_* environment says, at once (a synchronous exporter). A
// message's first attempt fails; a later one advances it to the stage
// given as the first argument.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

func main() {
	next := flag.String("next", "", "advance messages to `STAGE`")
	exp, err := otlptracehttp.New(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracestage:", err)
		os.Exit(1)
	}
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("tracestage")
	worker.Main(func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		_, span := tracer.Start(ctx, "work")
		span.SetAttributes(attribute.Int("attempt", m.Attempts))
		defer span.End()
		if m.Attempts == 1 {
			return worker.Move{}, errors.New("the first attempt fails")
		}
		return worker.Advance(*next), nil
	})
}
