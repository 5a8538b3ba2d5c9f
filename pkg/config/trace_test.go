package config

import "testing"

func TestTracingKeys(t *testing.T) {
	c, err := Parse("pepsi.conf", []byte("[pepsi-dispatch]\nTRACING = on\n[pepsi-httpd]\nTRACE_URL = http://jaeger:16686/trace/{trace_id}\n"+
		"[stage-a]\nPROGRAM = a\nTRACE = link\n[stage-b]\nPROGRAM = b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Dispatch.Tracing || c.HTTPD.TraceURL != "http://jaeger:16686/trace/{trace_id}" {
		t.Errorf("TRACING %v, TRACE_URL %q", c.Dispatch.Tracing, c.HTTPD.TraceURL)
	}
	if !c.Stages[0].TraceLink || c.Stages[1].TraceLink {
		t.Errorf("TRACE: a %v, b %v; want link, child", c.Stages[0].TraceLink, c.Stages[1].TraceLink)
	}
}
