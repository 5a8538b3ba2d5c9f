package config

import "fmt"

// setTracing sets [pepsi-dispatch] TRACING, on or off.
func setTracing(d *Dispatch, key, v string) string {
	switch v {
	case "on":
		d.Tracing = true
	case "off", "":
		d.Tracing = false
	default:
		return fmt.Sprintf("%s: %q is not on or off", key, v)
	}
	return ""
}

// setTraceLink sets a stage's TRACE: child (the default) or link.
func setTraceLink(st *Stage, key, v string) string {
	switch v {
	case "child", "":
		st.TraceLink = false
	case "link":
		st.TraceLink = true
	default:
		return fmt.Sprintf("%s: %q is not a relationship (want child or link)", key, v)
	}
	return ""
}
