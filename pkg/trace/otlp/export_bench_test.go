package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// BenchmarkExport measures a pass span from Emit to the collector's
// answer: the encoding, the batch and the HTTP request. The queue holds
// every span, so that each is exported (dropped/op says if not).
func BenchmarkExport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	ex, err := Start(context.Background(), Options{Service: "bench", Queue: b.N + 1})
	if err != nil {
		b.Fatal(err)
	}
	parent, _ := trace.SpanContextFromContext(context.Background()), 0
	now := time.Now()
	p := Pass{Stage: "resize", Start: now, End: now.Add(time.Millisecond), ID: 42, Attempt: 1, Waited: 0.01,
		Result: "ok", Move: "advance", Next: "store", PID: 1234}
	d0 := Dropped()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.Span = ex.Begin(parent, false)
		ex.Emit(&p)
	}
	if err := ex.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(Dropped()-d0)/float64(b.N), "dropped/op")
}
