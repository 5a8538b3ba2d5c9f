package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestHeaders: /metrics and every page are not cached (the static files
// are), nor is the 401 that exporter-toolkit answers before the dashboard
// sees a request, which carries the dashboard's security headers too;
// over TLS every response, the 401 included, carries HSTS, and over plain
// HTTP none does.
func TestHeaders(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	for _, tc := range []struct {
		path  string
		o     req
		code  int
		cache string
	}{
		{"/metrics", bob, http.StatusOK, "no-store"},
		{"/metrics", req{}, http.StatusUnauthorized, "no-store"},
		{"/", req{}, http.StatusUnauthorized, "no-store"},
		{"/", req{user: "alice", pass: "guess"}, http.StatusUnauthorized, "no-store"},
		{"/", bob, http.StatusOK, "no-store"},
		{"/healthz", bob, http.StatusOK, "no-store"},
		{"/nowhere", bob, http.StatusNotFound, "no-store"},
		{"/static/style.css", bob, http.StatusOK, "public, max-age=3600"},
	} {
		r := s.do("GET", tc.path, nil, tc.o)
		if r.code != tc.code || r.header.Get("Cache-Control") != tc.cache {
			t.Errorf("GET %s as %q: %d, Cache-Control %q; want %d, %q", tc.path, tc.o.user, r.code, r.header.Get("Cache-Control"), tc.code, tc.cache)
		}
		if r.header.Get("Strict-Transport-Security") != "" {
			t.Errorf("GET %s over plain HTTP: HSTS %q", tc.path, r.header.Get("Strict-Transport-Security"))
		}
		if r.code == http.StatusUnauthorized && (r.header.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'")) {
			t.Errorf("GET %s: the 401 lacks the security headers: %v", tc.path, r.header)
		}
	}

	cert, key := selfSigned(t)
	tls := newSite(t, siteOptions{users: true, tls: "tls_server_config:\n  cert_file: " + cert + "\n  key_file: " + key + "\n"})
	for _, tc := range []struct {
		path string
		o    req
		code int
	}{{"/", bob, http.StatusOK}, {"/", req{}, http.StatusUnauthorized}, {"/metrics", bob, http.StatusOK}, {"/static/style.css", bob, http.StatusOK}} {
		r := tls.do("GET", tc.path, nil, tc.o)
		if r.code != tc.code || r.header.Get("Strict-Transport-Security") != "max-age=31536000" {
			t.Errorf("GET %s over TLS as %q: %d, HSTS %q", tc.path, tc.o.user, r.code, r.header.Get("Strict-Transport-Security"))
		}
	}
}
