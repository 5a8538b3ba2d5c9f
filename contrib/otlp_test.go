package contrib_test

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes what it is
// sent, the real protobuf wire format (ExportTraceServiceRequest), and
// keeps the spans with their resources' attributes.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []gotSpan
	bad   []string // requests it could not decode
}

// gotSpan is a span received, with its resource's attributes.
type gotSpan struct {
	*tracepb.Span
	Resource map[string]string
}

// startOTLP starts a receiver, closed when t ends.
func startOTLP(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err == nil && req.Header.Get("Content-Encoding") == "gzip" {
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(body)); err == nil {
			body, err = io.ReadAll(zr)
		}
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil && req.URL.Path != "/v1/traces" {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type")+": "+errString(err))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	for _, rs := range msg.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, gotSpan{Span: s, Resource: res})
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func errString(err error) string {
	if err == nil {
		return "not protobuf"
	}
	return err.Error()
}

// got returns the spans received so far, and the requests refused.
func (r *otlpReceiver) got() ([]gotSpan, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gotSpan(nil), r.spans...), append([]string(nil), r.bad...)
}

// attrs returns attributes as strings: a string's value, an int's digits.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = "float"
		default:
			m[kv.Key] = kv.Value.String()
		}
	}
	return m
}

// hexID is an id's lower-case hex, as a traceparent spells it.
func hexID(b []byte) string { return hex.EncodeToString(b) }
