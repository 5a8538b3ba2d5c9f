package dashboard

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
)

// WebServe returns what serves an HTTP server on a listener through the
// Prometheus exporters' web configuration file webConfig
// (exporter-toolkit's web.Serve): TLS and basic auth, the file read again
// for every connection and request; plain HTTP when webConfig is "". It is
// metrics.Server's Serve. exporter-toolkit's own lines go to log at debug.
//
// Every response carries the dashboard's security headers, no-store and,
// over TLS, HSTS, including the 401 that exporter-toolkit answers before
// the dashboard sees a request (outerHeaders).
func WebServe(webConfig string, log *slog.Logger) func(net.Listener, *http.Server) error {
	quiet := slog.New(debugOnly{log.Handler()})
	return func(ln net.Listener, srv *http.Server) error {
		return web.Serve(&outerHeaders{Listener: ln, srv: srv}, srv, &web.FlagConfig{WebConfigFile: &webConfig}, quiet)
	}
}

// outerHeaders is a listener that, on its first Accept, wraps the
// server's handler (by then the one web.Serve has set, its basic-auth
// check around the dashboard) in one that sets securityHeaders first: the
// 401 of a request without valid credentials is exporter-toolkit's, and
// would carry none. web.Serve sets srv.Handler before it serves; Accept is
// called by the serving goroutine before it starts any connection's, so
// the wrap happens before any request reads the handler.
type outerHeaders struct {
	net.Listener
	srv  *http.Server
	once sync.Once
}

func (o *outerHeaders) Accept() (net.Conn, error) {
	o.once.Do(func() {
		inner := o.srv.Handler
		if inner == nil {
			inner = http.DefaultServeMux
		}
		o.srv.Handler = secure(inner)
	})
	return o.Listener.Accept()
}

// Scheme is "https" when the web configuration file turns TLS on, else "http".
func Scheme(webConfig string) string {
	if webConfig == "" {
		return "http"
	}
	data, err := os.ReadFile(webConfig)
	if err != nil {
		return "http"
	}
	var c struct {
		TLS web.TLSConfig `yaml:"tls_server_config"`
	}
	if yaml.Unmarshal(data, &c) != nil || !c.TLS.IsEnabled() {
		return "http"
	}
	return "https"
}

// debugOnly lowers a handler's info lines to debug: exporter-toolkit says
// at info how it listens, which pepsi httpd's own first line says.
type debugOnly struct{ h slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, lower(l))
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lower(r.Level)
	return d.h.Handle(ctx, r)
}

func (d debugOnly) WithAttrs(as []slog.Attr) slog.Handler { return debugOnly{d.h.WithAttrs(as)} }
func (d debugOnly) WithGroup(name string) slog.Handler    { return debugOnly{d.h.WithGroup(name)} }

func lower(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}
