package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// HTTPD holds the [pepsi-httpd] settings.
type HTTPD struct {
	// WebConfigFile is WEB_CONFIG_FILE, the Prometheus exporters' web
	// configuration (TLS, basic-auth users), made relative to the
	// directory of pepsi.conf when it is not absolute; "" (the default):
	// plain HTTP, no authentication, a read-only dashboard.
	WebConfigFile string
	WebConfigLine int // the line of WEB_CONFIG_FILE, 0 when unset
	// ActionUsers is ACTION_USERS: the users of the web configuration who
	// may retry and purge messages from the dashboard (default: none).
	ActionUsers     []string
	ActionUsersLine int // the line of ACTION_USERS, 0 when unset
	// TraceURL is TRACE_URL: a trace UI's address with {trace_id} where a
	// trace id goes (Jaeger: http://jaeger:16686/trace/{trace_id}); ""
	// (the default): trace ids are shown without a link.
	TraceURL string
}

// setHTTPD sets one [pepsi-httpd] key from file at line, or says what is wrong.
func setHTTPD(h *HTTPD, file, key, v string, line int) string {
	switch key {
	case "WEB_CONFIG_FILE":
		if v != "" && !filepath.IsAbs(v) {
			v = filepath.Join(filepath.Dir(file), v)
		}
		h.WebConfigFile, h.WebConfigLine = v, line
	case "TRACE_URL":
		if v != "" && !strings.Contains(v, "{trace_id}") {
			return fmt.Sprintf("%s: %q has no {trace_id} (want a URL with {trace_id} where the trace id goes)", key, v)
		}
		if v != "" && !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			return fmt.Sprintf("%s: %q is not an http:// or https:// URL", key, v)
		}
		h.TraceURL = v
	case "ACTION_USERS":
		users := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
		for _, u := range users {
			if strings.ContainsRune(u, ':') {
				return fmt.Sprintf("%s: bad user name %q (a basic-auth user name has no ':')", key, u)
			}
		}
		h.ActionUsers, h.ActionUsersLine = users, line
	}
	return ""
}
