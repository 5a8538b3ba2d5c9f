package dispatch

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPipeline drives b.N messages through three stages and reports
// stage passes per second and the dispatcher's CPU per pass (this process's
// CPU: the dispatcher runs in it; the workers are children).
//
//	go test -run '^$' -bench Pipeline -benchtime 20000x ./pkg/dispatch/
func BenchmarkPipeline(b *testing.B) {
	for _, bc := range []struct {
		name, payload string
		tracing       bool
	}{
		{"noop-statusline", "s1=tnext:s2 s2=tnext:s3 s3=tdone", false},
		{"noop-statusline-traced", "s1=tnext:s2 s2=tnext:s3 s3=tdone", true},
		{"stage-commits", "s1=advance:s2 s2=advance:s3 s3=finish", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			conf := "POLL_INTERVAL = 30\nSTATS_INTERVAL = 60\nWORKER_IDLE_TIMEOUT = 30"
			if bc.tracing {
				conf += "\nTRACING = on"
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlpSink(b))
			}
			bb := setup(b, conf,
				"s1\nPARALLELISM = 2\nQUEUE_LIMIT = 32", "s2\nPARALLELISM = 2\nQUEUE_LIMIT = 32", "s3\nPARALLELISM = 2\nQUEUE_LIMIT = 32")
			payloads := make([]string, b.N)
			for i := range payloads {
				payloads[i] = bc.payload
			}
			bb.enqueue("s1", payloads...)
			bb.logger = slog.New(slog.NewTextHandler(bb.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			start := time.Now()
			bb.start()
			bb.waitFor("all done", 10*time.Minute, func() bool { return bb.count("done") == int64(b.N) })
			elapsed := time.Since(start)
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			bb.stop()
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			passes := 3 * float64(b.N)
			b.ReportMetric(passes/elapsed.Seconds(), "passes/s")
			b.ReportMetric(float64(cpu.Microseconds())/passes, "cpu-µs/pass")
			if strings.Contains(bb.logs.String(), "level=ERROR") {
				b.Errorf("errors logged:\n%s", bb.logs)
			}
		})
	}
}

// otlpSink starts an OTLP/HTTP endpoint that reads and discards what it is
// sent, closed when b ends, and returns its URL.
func otlpSink(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}
