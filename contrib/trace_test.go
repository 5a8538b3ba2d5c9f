package contrib_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/queue"
	"github.com/pepsi-dev/pepsi/pkg/trace/otlp"
	"github.com/pepsi-dev/pepsi/pkg/worker/workertest"
)

// traceHandler is a pepsi_stage handler that records the traceparent its
// pass was given, and advances the message.
const traceHandler = `import sys
from pepsi_stage import Advance, run

def handle(m, cur):
    cur.execute("INSERT INTO seen_trace (id, stage, traceparent) VALUES (%s, %s, %s)", (m.id, m.stage, m.traceparent))
    return Advance(sys.argv[1])

run(handle)
`

// TestTraceAcrossStages: a message enqueued with a traceparent passes a
// pkg/worker stage (whose first attempt fails, then is retried), a Python
// stage on pepsi_stage, a TypeScript stage on @pepsi/stage and a shell
// stage, under a dispatcher with TRACING
// on that exports to a receiver decoding OTLP/HTTP's protobuf. One span
// arrives per pass, in the message's trace as its child (TRACE = child)
// or in a trace of its own linking to it (TRACE = link), with its
// attributes; the pkg/worker stage's own span nests under its pass, and
// the Python and TypeScript stages were told their passes' span contexts.
func TestTraceAcrossStages(t *testing.T) {
	py, _ := pythonVenv(t)
	node, _ := nodeTools(t)
	tsStage := node + " " + filepath.Join(nodePackage(t), "build", "test", "stages", "trace.js")
	rcv := startOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "pepsi-test")
	dir := t.TempDir()
	handler := filepath.Join(dir, "handler.py")
	shell := filepath.Join(dir, "stage.sh")
	if err := os.WriteFile(handler, []byte(traceHandler), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shell, []byte("#!/bin/sh\nwhile read id rest; do echo '0 done'; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	gostage := testkit.Build(t, "github.com/pepsi-dev/pepsi/internal/tracestage")
	p := workertest.StartWith(t, workertest.Options{Dispatch: "TRACING = on\n"},
		workertest.Stage{Name: "go", Program: gostage + " --next py", Parallelism: 1, Conf: "RETRIES = 1\nRETRY_DELAY = 0.2\n"},
		workertest.Stage{Name: "py", Program: py + " " + handler + " ts", Parallelism: 1, Conf: "TRACE = link\n"},
		workertest.Stage{Name: "ts", Program: tsStage + " --next sh", Parallelism: 1},
		workertest.Stage{Name: "sh", Program: shell, Parallelism: 1})
	ctx := context.Background()
	if _, err := p.DB.Pool.Exec(ctx, "CREATE TABLE seen_trace (id bigint, stage text, traceparent text)"); err != nil {
		t.Fatal(err)
	}
	// A warm-up message without a trace context first: ids written to a
	// worker before the dispatcher read its hello go without one.
	warm := p.Enqueue("go", nil)[0]
	p.WaitSettled(2 * time.Minute)
	if r := p.Row(warm); r.Status != "done" {
		t.Fatalf("warm-up message %d: %+v; want done; log:\n%s", warm, r, p.Logs)
	}
	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	id, err := queue.Enqueue(ctx, p.DB.Pool, "go", nil, map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"})
	if err != nil {
		t.Fatal(err)
	}
	p.WaitSettled(2 * time.Minute)
	if r := p.Row(id); r.Status != "done" || r.Stage != "sh" {
		t.Fatalf("message %d: %+v; want done at sh; log:\n%s", id, r, p.Logs)
	}
	msg := strconv.FormatInt(id, 10)
	var spans []gotSpan
	ours := func() []gotSpan {
		all, _ := rcv.got()
		spans = spans[:0]
		for _, s := range all {
			if attrs(s.Attributes)["messaging.message.id"] == msg || hexID(s.TraceId) == traceID && s.Name == "work" {
				spans = append(spans, s)
			}
		}
		return spans
	}
	p.WaitFor("7 spans: 5 passes, 2 of the Go stage's own", time.Minute, func() bool { return len(ours()) >= 7 })
	p.Check()
	spans = ours()
	_, bad := rcv.got()
	if len(bad) > 0 {
		t.Errorf("requests the receiver could not decode: %q", bad)
	}
	passes := map[string][]gotSpan{}
	var work []gotSpan
	for _, s := range spans {
		if s.Name == "work" {
			work = append(work, s)
			continue
		}
		a := attrs(s.Attributes)
		passes[a["messaging.destination.name"]] = append(passes[a["messaging.destination.name"]], s)
		if s.Name != "process "+a["messaging.destination.name"] || s.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
			t.Errorf("pass span %q of kind %v; want process STAGE, a consumer", s.Name, s.Kind)
		}
		if s.Resource["service.name"] != "pepsi-test" || s.Resource["host.name"] == "" {
			t.Errorf("pass span's resource %v; want service.name pepsi-test and host.name", s.Resource)
		}
		if s.EndTimeUnixNano < s.StartTimeUnixNano || s.StartTimeUnixNano == 0 {
			t.Errorf("pass span %q from %d to %d", s.Name, s.StartTimeUnixNano, s.EndTimeUnixNano)
		}
	}
	if len(passes["go"]) != 2 || len(passes["py"]) != 1 || len(passes["ts"]) != 1 || len(passes["sh"]) != 1 || len(work) != 2 || len(spans) != 7 {
		t.Fatalf("spans: go %d, py %d, ts %d, sh %d, work %d, all %d; want 2, 1, 1, 1, 2 and 7", len(passes["go"]), len(passes["py"]),
			len(passes["ts"]), len(passes["sh"]), len(work), len(spans))
	}
	want := func(s gotSpan, kv map[string]string) {
		t.Helper()
		a := attrs(s.Attributes)
		for k, v := range kv {
			if a[k] != v {
				t.Errorf("%s attempt %s: %s = %q, want %q (all: %v)", s.Name, a["pepsi.attempt"], k, a[k], v, a)
			}
		}
		if a["pepsi.worker.pid"] == "" || a["pepsi.wait_seconds"] == "" {
			t.Errorf("%s: no worker pid or wait: %v", s.Name, a)
		}
	}
	first, second := passes["go"][0], passes["go"][1]
	if attrs(first.Attributes)["pepsi.attempt"] != "1" {
		first, second = second, first
	}
	want(first, map[string]string{"messaging.system": "pepsi", "messaging.destination.name": "go", "messaging.message.id": msg,
		"messaging.operation.type": "process", "pepsi.attempt": "1", "pepsi.priority": "", "pepsi.result": "failed", "pepsi.move": "retry",
		"pepsi.failure.reason": "stage go answered 1: the first attempt fails"})
	want(second, map[string]string{"pepsi.attempt": "2", "pepsi.result": "ok", "pepsi.move": "", "messaging.message.id": msg})
	want(passes["py"][0], map[string]string{"pepsi.attempt": "1", "pepsi.result": "ok", "messaging.destination.name": "py"})
	want(passes["sh"][0], map[string]string{"pepsi.result": "ok", "pepsi.move": "finish"})
	if first.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || second.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("status of the failed pass %v, of the retry %v", first.Status, second.Status)
	}
	want(passes["ts"][0], map[string]string{"pepsi.attempt": "1", "pepsi.result": "ok", "messaging.destination.name": "ts"})
	// TRACE = child: in the message's trace, children of its context.
	for _, s := range []gotSpan{first, second, passes["ts"][0], passes["sh"][0]} {
		if hexID(s.TraceId) != traceID || hexID(s.ParentSpanId) != parentID || len(s.Links) != 0 {
			t.Errorf("%s: trace %x, parent %x, %d links; want trace %s, parent %s", s.Name, s.TraceId, s.ParentSpanId, len(s.Links), traceID, parentID)
		}
	}
	// TRACE = link: a trace of its own, linking to the message's context.
	pys := passes["py"][0]
	if hexID(pys.TraceId) == traceID || len(pys.ParentSpanId) != 0 || len(pys.Links) != 1 ||
		hexID(pys.Links[0].TraceId) != traceID || hexID(pys.Links[0].SpanId) != parentID {
		t.Errorf("py: trace %x, parent %x, links %v; want a root linking to %s-%s", pys.TraceId, pys.ParentSpanId, pys.Links, traceID, parentID)
	}
	// Each kit's stage saw its own pass's span context.
	for _, k := range []struct {
		stage, kit string
		pass       gotSpan
	}{{"py", "the Python stage's msg.traceparent", pys}, {"ts", "the TypeScript stage's m.traceparent", passes["ts"][0]}} {
		var seen string
		err := p.DB.Pool.QueryRow(ctx, "SELECT coalesce(traceparent, '') FROM seen_trace WHERE id = $1 AND stage = $2", id, k.stage).Scan(&seen)
		if err != nil {
			t.Fatalf("%s: %v", k.kit, err)
		}
		if want := "00-" + hexID(k.pass.TraceId) + "-" + hexID(k.pass.SpanId) + "-01"; seen != want {
			t.Errorf("%s %q, want its pass's %q", k.kit, seen, want)
		}
	}
	// The pkg/worker stage's own spans nest under their passes.
	for _, w := range work {
		pass := first
		if attrs(w.Attributes)["attempt"] == "2" {
			pass = second
		}
		if hexID(w.TraceId) != traceID || hexID(w.ParentSpanId) != hexID(pass.SpanId) {
			t.Errorf("the stage's span (attempt %s): trace %x, parent %x; want trace %s, parent %x (its pass)",
				attrs(w.Attributes)["attempt"], w.TraceId, w.ParentSpanId, traceID, pass.SpanId)
		}
		if w.StartTimeUnixNano < pass.StartTimeUnixNano || w.EndTimeUnixNano > pass.EndTimeUnixNano {
			t.Errorf("the stage's span (attempt %s) is not within its pass", attrs(w.Attributes)["attempt"])
		}
	}
	if t.Failed() {
		t.Logf("dispatcher log:\n%s", p.Logs)
	}
}

// deadPasses is how many passes TestTraceDeadCollector makes: 100 000, or
// PEPSI_TRACE_PASSES.
func deadPasses(t *testing.T) int {
	n := 100_000
	if v := os.Getenv("PEPSI_TRACE_PASSES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("PEPSI_TRACE_PASSES=%q: want a number of passes", v)
		}
	}
	return n
}

// TestTraceDeadCollector: with the collector a port that accepts and never
// reads, a dispatcher with TRACING on still passes every message, its
// heap stays bounded (the spans that do not fit are dropped and counted,
// not kept), and nothing waits on the export.
func TestTraceDeadCollector(t *testing.T) {
	n := deadPasses(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn // accepted, never read
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	noop := testkit.Build(t, "github.com/pepsi-dev/pepsi/internal/noopstage")
	dropped := otlp.Dropped()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := workertest.StartWith(t, workertest.Options{Dispatch: "TRACING = on\n"},
		workertest.Stage{Name: "a", Program: noop, Parallelism: 2, QueueLimit: 32, MaxMessages: 1_000_000})
	ctx := context.Background()
	start := time.Now()
	if _, err := p.DB.Pool.Exec(ctx, `INSERT INTO pepsi.ingress (stage, headers)
		SELECT 'a', jsonb_build_object('traceparent', '00-0af7651916cd43dd8448eb211c80319c-' || lpad(to_hex(i), 16, '0') || '-01')
		  FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	var peak uint64
	p.WaitFor(fmt.Sprintf("%d messages done", n), 10*time.Minute, func() bool {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
		return p.Int64("SELECT count(*) FROM pepsi.state WHERE status = 'done'") == int64(n)
	})
	took := time.Since(start)
	p.Check()
	lost := otlp.Dropped() - dropped
	t.Logf("%d passes in %v (%.0f/s); %d spans dropped, %d taken for export; heap in use %d MB before, %d MB at most",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), lost, otlp.Handed(), before.HeapInuse>>20, peak>>20)
	if lost == 0 {
		t.Errorf("no span dropped with the collector dead")
	}
	// Spans kept would be a few KiB each: what the bounded queues hold is
	// a few MiB whatever the number of passes.
	if grew := int64(peak) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("the heap grew by %d MB over %d passes with the collector dead", grew>>20, n)
	}
}
