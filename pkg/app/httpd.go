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

	"github.com/pepsi-dev/pepsi/pkg/metrics"
)

func httpdCommand() *cli.Command {
	return &cli.Command{
		Name:      "httpd",
		Usage:     "serve the statistics and the queue's depth to Prometheus over HTTP",
		UsageText: "pepsi httpd --listen ADDR [--log-level LEVEL] [--log-format text|json]",
		Description: "A standalone Prometheus exporter: on /metrics, the families pepsi stats\n" +
			"--format prometheus prints (pepsi.stage_stats, pepsi.dispatch_stats, the\n" +
			"queue's depth, whether a dispatcher runs), read from the database when\n" +
			"scraped; on /healthz, 200 while the database answers. It runs until\n" +
			"SIGINT or SIGTERM and does not touch the dispatcher.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Aliases: []string{"l"}, Usage: "serve on `ADDR`, HOST:PORT or :PORT (required)"},
		}, logFlags()...),
		Action: runHTTPD,
	}
}

// httpdMaxAge is how long the exporter reuses a read of the tables (a
// variable for tests).
var httpdMaxAge = metrics.DefaultMaxAge

func runHTTPD(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	addr := c.String("listen")
	if addr == "" {
		return usage("--listen ADDR is required (HOST:PORT or :PORT)")
	}
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
	src := metrics.NewSource(cfg.DSN, "pepsi httpd")
	defer src.Close()
	exp := metrics.NewStats(metrics.StatsOptions{
		Source: src, Stages: cfg.StageNames(), MaxAge: httpdMaxAge, Version: c.App.Version, Log: log,
	})
	srv := metrics.NewServer(exp.Handler(), log)
	if err := srv.Start(addr); err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("listening", "addr", srv.Addr(), "metrics", "http://"+srv.Addr()+"/metrics")
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := src.Ping(pctx); err != nil && ctx.Err() == nil {
		log.Warn("database not reachable yet; scrapes fail until it is", "err", err)
	}
	cancel()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Stop(sctx)
	log.Info("stopped")
	return err
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
