package dashboard

import (
	"encoding/json"
	"strings"

	ptrace "github.com/pepsi-dev/pepsi/pkg/trace"
)

// traceOf returns the trace id of a message's traceparent header, and the
// trace UI's page of it when TRACE_URL is set; "" for a message without
// a valid one.
func (d *Dashboard) traceOf(raw json.RawMessage) (id, url string) {
	var h struct {
		Parent string `json:"traceparent"`
	}
	if json.Unmarshal(raw, &h) != nil || h.Parent == "" {
		return "", ""
	}
	sc, ok := ptrace.Parse(h.Parent, "")
	if !ok {
		return "", ""
	}
	id = sc.TraceID().String()
	if d.opts.TraceURL != "" {
		url = strings.ReplaceAll(d.opts.TraceURL, "{trace_id}", id)
	}
	return id, url
}
