package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/dispatch"
	"github.com/pepsi-dev/pepsi/pkg/metrics"
)

func dispatchCommand() *cli.Command {
	return &cli.Command{
		Name:      "dispatch",
		Usage:     "run the coordinator that hands messages to stage workers",
		UsageText: "pepsi dispatch [--stages LIST] [--standby] [--log-level LEVEL] [--log-format text|json]",
		Description: "Claims queued messages and feeds their ids to the stage programs of the\n" +
			"configuration, until SIGINT, SIGTERM, SIGHUP or SIGQUIT. Each stage has at\n" +
			"most one running dispatcher: by default a dispatcher owns every stage and\n" +
			"excludes every other one; with --stages (or STAGES) it owns those stages\n" +
			"only, and other dispatchers, on other hosts, may own the rest. A\n" +
			"dispatcher whose stages are owned exits 1, or with --standby waits to take\n" +
			"them over.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "stages", Usage: "own only the stages of `LIST` (comma-separated; overrides STAGES)"},
			&cli.BoolFlag{Name: "standby", DisableDefaultText: true, Usage: "wait until every stage of the set is free, then take over"},
		}, logFlags()...),
		Action: runDispatch,
	}
}

func runDispatch(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	log, err := newLogger(c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
	if err != nil {
		return err
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	// The DSNs are parsed here, as by the other commands, so that a bad
	// one, or a bad PG* variable, is named (exit 2); whether WORKER_DSN
	// reaches the dispatcher's database is checked once connected.
	if _, err := parseDSN(cfg); err != nil {
		return err
	}
	if cfg.WorkerDSN != "" {
		if _, err := pgx.ParseConfig(cfg.WorkerDSN); err != nil {
			return invalid("[database] WORKER_DSN in %s: %v", cfg.Path, err)
		}
	}
	if c.IsSet("stages") {
		if err := cfg.SetStages(c.String("stages")); err != nil {
			return invalid("%v", err)
		}
	}
	// One goroutine owns the dispatcher's state and the others only move
	// bytes: on one processor their hand-offs are switches of that
	// processor, not wake-ups of other threads (futex, work stealing),
	// which took half of its CPU on two cores. The rule is a stage
	// program's too (worker.OneProcessor). GOMAXPROCS in the environment
	// still rules.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	opts := dispatch.Options{Config: cfg, Log: log, Standby: c.Bool("standby")}
	var m *metrics.Observer
	if cfg.Dispatch.MetricsListen != "" {
		src := metrics.NewSource(cfg.DSN, "pepsi dispatch metrics")
		defer src.Close()
		m = metrics.NewObserver(metrics.ObserverOptions{Stages: ownedNames(cfg), Only: !cfg.OwnsAll(), Source: src, Version: c.App.Version, Log: log})
		opts.Observe = m
	}
	d, err := dispatch.New(opts)
	if err != nil {
		return invalid("%v", err)
	}
	if m != nil {
		// Bound before the dispatcher starts: a standby waiting for the
		// lock answers /healthz with 503.
		addr := cfg.Dispatch.MetricsListen
		srv := metrics.NewServer(m.Handler(), log)
		if err := srv.Start(addr); err != nil {
			return fmt.Errorf("METRICS_LISTEN %s: %w", addr, err)
		}
		log.Info("serving metrics", "addr", srv.Addr(), "metrics", "http://"+srv.Addr()+"/metrics")
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Stop(ctx)
		}()
	}
	// SIGHUP (a closed terminal) and SIGQUIT (Ctrl-\, pkill -QUIT) stop it
	// cleanly too, rather than killing it with its messages left running:
	// Go's default for SIGQUIT, a goroutine dump and exit 2, is never what
	// an operator stopping a daemon wants. SIGABRT still dumps.
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	return d.Run(ctx)
}

// logFlags are the --log-level and --log-format flags of the long-running commands.
func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log `LEVEL`: debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log `FORMAT`: text or json"},
	}
}

// newLogger builds the structured logger the dispatcher writes to w.
func newLogger(w interface{ Write([]byte) (int, error) }, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usage("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usage("--log-format %q: want text or json", format)
}

// ownedNames lists the stages the dispatcher owns: its metrics carry
// those only.
func ownedNames(cfg *config.Config) []string {
	var names []string
	for _, s := range cfg.Owned() {
		names = append(names, s.Name)
	}
	return names
}
