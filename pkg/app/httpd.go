package app

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/dashboard"
	"github.com/pepsi-dev/pepsi/pkg/metrics"
)

func httpdCommand() *cli.Command {
	return &cli.Command{
		Name:      "httpd",
		Usage:     "serve the dashboard, and the statistics and the queue's depth to Prometheus, over HTTP",
		UsageText: "pepsi httpd [--listen ADDR] [--web.config.file FILE] [--log-level LEVEL] [--log-format text|json]",
		Description: "A web dashboard and a standalone Prometheus exporter. On /, the\n" +
			"dashboard: the queue by stage and status, throughput, the dispatcher and\n" +
			"its standbys, failures grouped by reason, messages, and the actions that\n" +
			"retry and purge them (only for the ACTION_USERS of a web configuration).\n" +
			"On /metrics, the families pepsi stats --format prometheus prints, read\n" +
			"from the database when scraped; on /healthz, 200 while the database\n" +
			"answers. TLS and basic auth come from the web configuration file of the\n" +
			"Prometheus exporters. It runs until SIGINT or SIGTERM.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Aliases: []string{"l"}, Value: defaultHTTPDListen, Usage: "serve on `ADDR`, HOST:PORT or :PORT"},
			&cli.StringFlag{Name: "web.config.file", Usage: "TLS and basic auth from the web configuration `FILE` (default: [pepsi-httpd] WEB_CONFIG_FILE)", TakesFile: true},
		}, logFlags()...),
		Action: runHTTPD,
	}
}

// defaultHTTPDListen is where pepsi httpd listens unless told otherwise:
// this machine only.
const defaultHTTPDListen = "127.0.0.1:9188"

// httpdMaxAge is how long the exporter reuses a read of the tables (a
// variable for tests).
var httpdMaxAge = metrics.DefaultMaxAge

// httpdConns is how many database sessions pepsi httpd opens at most.
const httpdConns = 4

func runHTTPD(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	addr := c.String("listen")
	if err := checkListen(addr); err != nil {
		return usage("--listen %q: %v", addr, err)
	}
	log, err := newLogger(c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
	if err != nil {
		return err
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if _, err := parseDSN(cfg); err != nil {
		return err
	}
	auth, err := httpdAuth(c, cfg)
	if err != nil {
		return err
	}
	src := metrics.NewPoolSource(cfg.DSN, "pepsi httpd", httpdConns)
	defer src.Close()
	exp := metrics.NewStats(metrics.StatsOptions{
		Source: src, Stages: cfg.StageNames(), MaxAge: httpdMaxAge, Version: c.App.Version, Log: log,
	})
	dash := dashboard.New(dashboard.Options{
		DB: src.DB, Stages: cfg.StageNames(), Auth: auth, Metrics: exp.Handler(), Version: c.App.Version, Log: log,
		StatsInterval: cfg.Dispatch.StatsInterval, Schedules: cfg.Schedules, PollInterval: cfg.Dispatch.PollInterval,
		TraceURL: cfg.HTTPD.TraceURL,
	})
	srv := metrics.NewServer(dash.Handler(), log)
	srv.Serve = dashboard.WebServe(auth.WebConfigFile(), log)
	srv.WriteTimeout = 11 * time.Minute // a dashboard action may take minutes
	if err := srv.Start(addr); err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	base := dashboard.Scheme(auth.WebConfigFile()) + "://" + srv.Addr()
	log.Info("listening", "addr", srv.Addr(), "dashboard", base+"/", "metrics", base+"/metrics",
		"web_config", auth.WebConfigFile(), "action_users", len(cfg.HTTPD.ActionUsers))
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		dash.Run(ctx)
	}()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := src.Ping(pctx); err != nil && ctx.Err() == nil {
		log.Warn("database not reachable yet; scrapes and pages fail until it is", "err", err)
	}
	cancel()
	<-ctx.Done()
	<-sampled
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Stop(sctx)
	log.Info("stopped")
	return err
}

// httpdAuth checks the web configuration file (--web.config.file, else
// WEB_CONFIG_FILE) and ACTION_USERS, and says who may act.
func httpdAuth(c *cli.Context, cfg *config.Config) (*dashboard.Auth, error) {
	h := cfg.HTTPD
	file, where := h.WebConfigFile, func(err error) error {
		return &config.Error{File: cfg.Path, Line: h.WebConfigLine, Msg: "WEB_CONFIG_FILE " + h.WebConfigFile + ": " + err.Error()}
	}
	if c.IsSet("web.config.file") {
		file = c.String("web.config.file")
		where = func(err error) error { return invalid("--web.config.file %s: %v", file, err) }
		if file == "" {
			return nil, usage("--web.config.file: give a file")
		}
	}
	if err := dashboard.CheckWebConfig(file); err != nil {
		return nil, where(err)
	}
	auth, err := dashboard.NewAuth(file, h.ActionUsers)
	if err != nil {
		return nil, &config.Error{File: cfg.Path, Line: h.ActionUsersLine, Msg: "ACTION_USERS: " + err.Error()}
	}
	return auth, nil
}

// checkListen checks a listen address as METRICS_LISTEN is checked:
// HOST:PORT or :PORT, the port a number (0: any free port) or a service name.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want HOST:PORT or :PORT")
	}
	if port == "" {
		return fmt.Errorf("no port")
	}
	if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
		return fmt.Errorf("port %d out of range", n)
	}
	return nil
}
