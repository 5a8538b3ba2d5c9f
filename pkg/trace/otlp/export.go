// Package otlp exports the dispatcher's pass spans over OTLP/HTTP with
// the OpenTelemetry SDK, batched and bounded: the loop that emits them
// never waits.
package otlp

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultQueue is how many finished passes wait for the SDK at most;
// more are dropped (Dropped).
const DefaultQueue = 4096

// dropped and exported count the pass spans dropped because the queue
// was full, and those handed to the SDK, in this process.
var dropped, handed atomic.Uint64

// Dropped returns how many spans were dropped in this process because
// export could not keep up.
func Dropped() uint64 { return dropped.Load() }

// Handed returns how many spans were handed to the SDK in this process.
func Handed() uint64 { return handed.Load() }

// Options configures an Exporter.
type Options struct {
	Service string       // service.name unless OTEL_SERVICE_NAME says otherwise
	Queue   int          // finished spans waiting for the SDK at most; 0: DefaultQueue
	Log     *slog.Logger // export errors, at most one line a minute; nil: slog.Default()
}

// Exporter sends pass spans over OTLP/HTTP, configured by the OTEL_*
// environment variables. Emit never blocks: a span finds room in a
// bounded queue or is dropped and counted; one goroutine hands the queue
// to the SDK's batch span processor, which exports in batches.
type Exporter struct {
	ch      chan Pass
	bsp     sdktrace.SpanProcessor
	res     *resource.Resource
	scope   instrumentation.Scope
	sampler sampler
	done    chan struct{}
	once    sync.Once
}

// Start makes an Exporter. It connects to nothing yet: a collector that
// is down only costs spans.
func Start(ctx context.Context, o Options) (*Exporter, error) {
	smp, err := samplerFromEnv()
	if err != nil {
		return nil, err
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
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
	otel.SetErrorHandler(&logOnce{log: o.Log})
	// The SDK's queue blocks its caller, the feeding goroutine, rather
	// than drop in silence: the drops happen in Emit, where they are
	// counted. Spans go to it as finished snapshots, not through a tracer:
	// their ids, times and sampling are decided already, and a tracer's
	// span would cost as much again.
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking())
	e := &Exporter{ch: make(chan Pass, o.Queue), bsp: bsp, res: res, scope: instrumentation.Scope{Name: "github.com/pepsi-dev/pepsi"},
		sampler: smp, done: make(chan struct{})}
	go e.feed()
	return e, nil
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

// feed hands queued passes to the SDK, as spans with their own times and ids.
func (e *Exporter) feed() {
	defer close(e.done)
	for p := range e.ch {
		e.bsp.OnEnd(p.stub(e.res, e.scope))
		handed.Add(1)
	}
}

// Shutdown exports what is queued and stops, giving up when ctx ends.
// Emit must not be called after it.
func (e *Exporter) Shutdown(ctx context.Context) error {
	var err error
	e.once.Do(func() {
		close(e.ch)
		select {
		case <-e.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		err = errors.Join(err, e.bsp.Shutdown(ctx))
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
