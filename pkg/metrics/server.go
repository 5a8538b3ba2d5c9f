package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the metrics of reg on /metrics, and on /healthz 200 "ok"
// when health returns nil, else 503 and health's error. / lists the two.
// A collector's error does not fail a scrape: what could be gathered is
// served (the collectors here report their own failures as series).
func Handler(reg *prometheus.Registry, health func(context.Context) error) http.Handler {
	return handler(reg, health, promhttp.ContinueOnError)
}

// handler is Handler with the scrape's error handling as an argument.
func handler(reg *prometheus.Registry, health func(context.Context) error, onError promhttp.HandlerErrorHandling) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     onError,
		Registry:          reg, // promhttp_metric_handler_errors_total
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := health(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>pepsi</title></head><body><h1>pepsi</h1>`+
			`<p><a href="metrics">/metrics</a> (Prometheus) &middot; <a href="healthz">/healthz</a></p></body></html>`+"\n")
	})
	return mux
}

// Server is an HTTP server for a Handler: Start binds
// and serves in the background, Stop shuts it down.
type Server struct {
	// Serve, when set before Start, serves srv on ln in place of
	// srv.Serve(ln) (pepsi httpd's: exporter-toolkit's, for TLS and basic
	// auth). It returns when the server is shut down.
	Serve func(ln net.Listener, srv *http.Server) error
	// WriteTimeout bounds the writing of a response; 0 means one minute.
	WriteTimeout time.Duration

	handler http.Handler
	log     *slog.Logger
	srv     *http.Server
	ln      net.Listener
	done    chan error
}

// NewServer returns a server for h that logs to log (nil: slog.Default()).
func NewServer(h http.Handler, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{handler: h, log: log}
}

// Start listens on addr (HOST:PORT or :PORT; port 0 picks a free one, see
// Addr) and serves in the background. It fails at once when addr cannot be
// bound; the error is the cause alone ("bind: address already in use"),
// for the caller to name the address and where it came from.
func (s *Server) Start(addr string) error {
	if s.srv != nil {
		return errors.New("metrics: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			err = oe.Err
		}
		return err
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      cmp.Or(s.WriteTimeout, time.Minute),
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.done = make(chan error, 1)
	serve := s.Serve
	if serve == nil {
		serve = func(ln net.Listener, srv *http.Server) error { return srv.Serve(ln) }
	}
	srv := s.srv
	go func() {
		err := serve(ln, srv)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			s.log.Error("metrics: HTTP server failed", "addr", ln.Addr().String(), "err", err)
		}
		s.done <- err
	}()
	return nil
}

// Addr is the address the server listens on ("" before Start).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop stops accepting connections and waits, until ctx ends, for requests
// in progress; then it closes what is left.
func (s *Server) Stop(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	if serr := <-s.done; err == nil {
		err = serr
	}
	s.srv = nil
	return err
}
