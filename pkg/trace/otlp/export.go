// Package otlp exports the dispatcher's pass spans over OTLP/HTTP with
// the OpenTelemetry SDK's exporter, batched and bounded: the loop that
// emits them never waits.
package otlp

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// DefaultQueue is how many finished passes wait for export at most,
// unless OTEL_BSP_MAX_QUEUE_SIZE says otherwise; more are dropped
// (Dropped).
const DefaultQueue = 4096

// dropped and handed count the pass spans dropped because the queue was
// full, and those taken into a batch, in this process.
var dropped, handed atomic.Uint64

// Dropped returns how many spans were dropped in this process because
// export could not keep up.
func Dropped() uint64 { return dropped.Load() }

// Handed returns how many spans were taken into a batch for export in
// this process.
func Handed() uint64 { return handed.Load() }

// Options configures an Exporter.
type Options struct {
	Service string       // service.name unless OTEL_SERVICE_NAME says otherwise
	Queue   int          // finished spans waiting for export at most; 0: OTEL_BSP_MAX_QUEUE_SIZE, else DefaultQueue
	Log     *slog.Logger // export errors, at most one line a minute; nil: slog.Default()
}

// Exporter sends pass spans over OTLP/HTTP, configured by the OTEL_*
// environment variables. Emit never blocks: a span finds room in a
// bounded queue or is dropped and counted. One goroutine encodes the
// queue's spans into batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, at least
// every OTEL_BSP_SCHEDULE_DELAY) and sends each with the SDK's OTLP/HTTP
// client, which keeps the OTEL_EXPORTER_OTLP_* settings, the retries and
// the compression.
type Exporter struct {
	ch      chan Pass
	client  otlptrace.Client
	errs    *logOnce
	sampler sampler

	res      *resourcepb.Resource
	schema   string
	scope    *commonpb.InstrumentationScope
	delay    time.Duration // OTEL_BSP_SCHEDULE_DELAY
	timeout  time.Duration // OTEL_BSP_EXPORT_TIMEOUT
	batchMax int           // OTEL_BSP_MAX_EXPORT_BATCH_SIZE

	enc   encoder
	batch []byte // the batch's spans, ScopeSpans.spans fields
	n     int    // spans in batch

	stop context.Context // Shutdown's, for the last batch
	done chan struct{}
	once sync.Once
}

// Start makes an Exporter. It connects to nothing yet: a collector that
// is down only costs spans.
func Start(ctx context.Context, o Options) (*Exporter, error) {
	smp, err := samplerFromEnv()
	if err != nil {
		return nil, err
	}
	if o.Queue <= 0 {
		o.Queue = envInt("OTEL_BSP_MAX_QUEUE_SIZE", DefaultQueue)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	client := otlptracehttp.NewClient()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	base := resource.NewSchemaless(attribute.String("service.name", o.Service), attribute.String("host.name", host))
	env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && env == nil {
		return nil, err
	}
	res, err := resource.Merge(base, env)
	if err != nil {
		res = base
	}
	errs := &logOnce{log: o.Log}
	otel.SetErrorHandler(errs)
	e := &Exporter{ch: make(chan Pass, o.Queue), client: client, errs: errs, sampler: smp,
		res: resourceProto(res), schema: res.SchemaURL(), scope: &commonpb.InstrumentationScope{Name: "github.com/pepsi-dev/pepsi"},
		delay:    time.Duration(envInt("OTEL_BSP_SCHEDULE_DELAY", 5000)) * time.Millisecond,
		timeout:  time.Duration(envInt("OTEL_BSP_EXPORT_TIMEOUT", 30000)) * time.Millisecond,
		batchMax: envInt("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
		stop:     context.Background(), done: make(chan struct{})}
	go e.run()
	return e, nil
}

// envInt is the environment variable name as a positive number, or def
// when it is unset or not one (as the SDK takes its OTEL_BSP_* settings).
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// resourceProto is res as OTLP's protobuf, made once.
func resourceProto(res *resource.Resource) *resourcepb.Resource {
	r := &resourcepb.Resource{}
	for _, kv := range res.Attributes() {
		v := &commonpb.AnyValue{}
		switch kv.Value.Type() {
		case attribute.BOOL:
			v.Value = &commonpb.AnyValue_BoolValue{BoolValue: kv.Value.AsBool()}
		case attribute.INT64:
			v.Value = &commonpb.AnyValue_IntValue{IntValue: kv.Value.AsInt64()}
		case attribute.FLOAT64:
			v.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: kv.Value.AsFloat64()}
		default:
			v.Value = &commonpb.AnyValue_StringValue{StringValue: kv.Value.String()}
		}
		r.Attributes = append(r.Attributes, &commonpb.KeyValue{Key: string(kv.Key), Value: v})
	}
	return r
}

// Begin returns the span context of a pass handed out now: in the
// message's trace (parent, when valid and not link) or a new one,
// sampled as the sampler decides.
func (e *Exporter) Begin(parent trace.SpanContext, link bool) trace.SpanContext {
	var c trace.SpanContextConfig
	if parent.IsValid() && !link {
		c.TraceID, c.TraceState = parent.TraceID(), parent.TraceState()
	} else {
		parent = trace.SpanContext{}
		putRandom(c.TraceID[:])
	}
	putRandom(c.SpanID[:])
	if e.sampler.sampled(parent, c.TraceID) {
		c.TraceFlags = trace.FlagsSampled
	}
	return trace.NewSpanContext(c)
}

// putRandom fills b with random bytes, not all zero.
func putRandom(b []byte) {
	for {
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		for _, x := range b {
			if x != 0 {
				return
			}
		}
	}
}

// Emit queues a finished pass for export, or drops and counts it when
// the queue is full. It never blocks. A pass that was not sampled is not
// queued.
func (e *Exporter) Emit(p *Pass) {
	if !p.Span.IsSampled() {
		return
	}
	select {
	case e.ch <- *p:
	default:
		dropped.Add(1)
	}
}

// run encodes queued passes into batches and exports each when it is
// full or has waited the schedule's delay, until the queue is closed.
func (e *Exporter) run() {
	defer close(e.done)
	tick := time.NewTicker(e.delay)
	defer tick.Stop()
	for {
		select {
		case p, ok := <-e.ch:
			if !ok {
				e.export(e.stop)
				return
			}
			e.batch = e.enc.appendSpan(e.batch, &p)
			e.n++
			handed.Add(1)
			if e.n >= e.batchMax {
				e.export(context.Background())
			}
		case <-tick.C:
			e.export(context.Background())
		}
	}
}

// export sends the batch, if it holds a span, within the export timeout
// and ctx. The spans go as the raw spans field of one ScopeSpans, which
// the client's protobuf marshalling writes out as it is.
func (e *Exporter) export(ctx context.Context) {
	if e.n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	ss := &tracepb.ScopeSpans{Scope: e.scope}
	ss.ProtoReflect().SetUnknown(protoreflect.RawFields(e.batch))
	rs := []*tracepb.ResourceSpans{{Resource: e.res, ScopeSpans: []*tracepb.ScopeSpans{ss}, SchemaUrl: e.schema}}
	if err := e.client.UploadTraces(ctx, rs); err != nil {
		e.errs.Handle(err)
	}
	e.batch, e.n = e.batch[:0], 0
}

// Shutdown exports what is queued and stops, giving up when ctx ends.
// Emit must not be called after it.
func (e *Exporter) Shutdown(ctx context.Context) error {
	var err error
	e.once.Do(func() {
		e.stop = ctx
		close(e.ch)
		select {
		case <-e.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		err = errors.Join(err, e.client.Stop(ctx))
	})
	return err
}

// logOnce logs the SDK's errors (a collector down: one per batch) at
// most once a minute.
type logOnce struct {
	log  *slog.Logger
	mu   sync.Mutex
	last time.Time
}

func (l *logOnce) Handle(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.last) < time.Minute {
		return
	}
	l.last = time.Now()
	l.log.Warn("trace export failed; spans may be lost", "err", err, "dropped", Dropped())
}
