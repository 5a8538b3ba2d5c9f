package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// The targets for tracing (issue 52): with TRACING on at sampling
// ratio 1, the share of the throughput with it off that each pipeline keeps.
const (
	targetTracingNoop = 0.90 // the status-line (no-op) pipeline
	targetTracingWork = 0.97 // the commit pipeline (real work)
)

// tracingRuns is how often each pipeline runs with TRACING off and on,
// alternated (off, on, off, on).
const tracingRuns = 2

// tracing measures what TRACING costs: the status-line pipeline and the
// commit pipeline, each run with it off and on (every pass sampled, its
// span exported over OTLP/HTTP to a sink the bench runs, which reads and
// discards), alternated, the runs of each side summed.
func (b *bench) tracing(ctx context.Context) error {
	sink, err := startSink()
	if err != nil {
		return err
	}
	defer sink.close()
	for k, v := range map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_TRACES_SAMPLER": "traceidratio",
		"OTEL_TRACES_SAMPLER_ARG": "1", "OTEL_SERVICE_NAME": "pepsi-bench"} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		key, name, mode string
		workers, n      int
		target          float64
	}{
		{"tracing.noop", "status-line pipeline", "statusline", b.o.Stages * b.o.Parallelism, b.o.Messages, targetTracingNoop},
		{"tracing.work", "commit pipeline", "tx", b.o.Stages * b.o.Parallelism, b.o.CommitMessages, targetTracingWork},
	} {
		var passes, elapsed, cpu [2]float64 // off, on
		var load float64
		for i := range 2 * tracingRuns {
			on := i%2 == 1
			p := b.newPipeline(fmt.Sprintf("tracing %s %v", c.mode, on), c.mode, c.workers)
			p.tracing = on
			r, err := b.pipelineRun(ctx, p, c.n, false)
			if err != nil {
				return err
			}
			side := i % 2
			passes[side] += float64(len(p.stages) * r.messages)
			elapsed[side] += r.elapsed.Seconds()
			cpu[side] += float64(r.cpu.Microseconds())
			load = max(load, r.load)
		}
		off, on := passes[0]/elapsed[0], passes[1]/elapsed[1]
		b.report.add(Figure{Key: c.key, Name: fmt.Sprintf("%s (%d workers), TRACING on, ratio 1", c.name, c.workers),
			Value: on, Unit: "passes/s", Ceiling: off, Of: fmt.Sprintf("TRACING off, alternated, %d runs each", tracingRuns),
			Target: fmt.Sprintf("≥ %.2f", c.target), Met: atLeast(on/off, c.target), Load: load})
		b.report.note("%s, TRACING off / on: %s / %s passes/s; dispatcher CPU per stage pass %.1f / %.1f µs",
			c.name, num(off), num(on), cpu[0]/passes[0], cpu[1]/passes[1])
	}
	b.report.note("tracing: the sink took %d OTLP requests, %s bytes", sink.requests.Load(), num(float64(sink.bytes.Load())))
	return nil
}

// sink is an OTLP/HTTP endpoint that reads what it is sent, counts it
// and answers success.
type sink struct {
	url      string
	srv      *http.Server
	requests atomic.Int64
	bytes    atomic.Int64
}

func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) close() { _ = s.srv.Close() }
