package dashboard_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/dashboard"
)

// TestMessageTrace: the message page shows the trace id of a message's
// traceparent header, linked to the trace UI TRACE_URL names, and nothing
// for a message without one.
func TestMessageTrace(t *testing.T) {
	t.Parallel()
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	for _, url := range []string{"", "https://jaeger.example/trace/{trace_id}?uiFind=1"} {
		s := newSite(t, siteOptions{stages: []string{"a"}, options: func(o *dashboard.Options) { o.TraceURL = url }})
		ids := s.enqueue("a", 2, []byte("x"))
		s.exec(`UPDATE pepsi.message SET headers = jsonb_build_object('traceparent', '00-`+traceID+`-b7ad6b7169203331-01') WHERE id = $1`, ids[0])
		body := s.get("/messages/"+strconv.FormatInt(ids[0], 10), http.StatusOK, req{})
		want := `<td class="trace"><code>` + traceID + `</code></td>`
		if url != "" {
			want = `<td class="trace"><a href="https://jaeger.example/trace/` + traceID + `?uiFind=1">` + traceID + `</a></td>`
		}
		if !strings.Contains(body, want) {
			t.Errorf("TRACE_URL %q: the message page lacks %s", url, want)
		}
		var m struct {
			TraceID  string `json:"trace_id"`
			TraceURL string `json:"trace_url"`
		}
		s.getJSON("/messages/"+strconv.FormatInt(ids[0], 10)+"?format=json", req{}, &m)
		if m.TraceID != traceID || (url != "") != (m.TraceURL != "") {
			t.Errorf("TRACE_URL %q: JSON trace_id %q, trace_url %q", url, m.TraceID, m.TraceURL)
		}
		if body := s.get("/messages/"+strconv.FormatInt(ids[1], 10), http.StatusOK, req{}); strings.Contains(body, `class="trace"`) {
			t.Errorf("a message without a traceparent shows a trace")
		}
	}
}
