package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// Main runs fn as a stage program and exits; see the package documentation
// for what it does and its exit status. It parses the command line with
// the flag package's CommandLine, adding -c FILE if the program has not
// defined it: a stage can define flags of its own before calling Main, and
// give them in PROGRAM (PROGRAM = /usr/lib/pepsi/parse --strict). Arguments
// other than flags are a usage error.
func Main(fn Func) { os.Exit(run(fn, InTransaction)) }

// MainOnStatusLine is Main for a stage whose work happens outside the
// database: fn runs outside any transaction and its move is answered on
// the status line for the dispatcher to apply (see OnStatusLine).
func MainOnStatusLine(fn Func) { os.Exit(run(fn, OnStatusLine)) }

// MainOneTrip is Main for a stage whose work is statements queued with
// Message.Queue: each pass goes out in one round trip (see OneTrip).
func MainOneTrip(fn Func) { os.Exit(run(fn, OneTrip)) }

// EnvProtocol is the worker protocol version the dispatcher says it speaks
// in the environment ($PEPSI_PROTOCOL, protocol.EnvProtocol), for
// Options.Protocol: 0 when it is unset or not a number (a dispatcher
// before version 2 sets none).
func EnvProtocol() int {
	v, err := strconv.Atoi(os.Getenv(protocol.EnvProtocol))
	if err != nil {
		return 0
	}
	return v
}

func run(fn Func, mode Mode) int {
	OneProcessor()
	name := filepath.Base(os.Args[0])
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		// The dispatcher stamps each line it relays; no time of our own.
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	cflag := flag.CommandLine.Lookup("c")
	if cflag == nil {
		flag.String("c", "", "read the pepsi configuration from `FILE` (default $PEPSI_CONFIG, else "+config.DefaultPath+")")
		cflag = flag.CommandLine.Lookup("c")
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected argument %q\n", name, flag.Arg(0))
		flag.Usage()
		return 2
	}
	cfg, err := config.Resolve(cflag.Value.String(), nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	app := "pepsi-worker " + name
	stage := os.Getenv("PEPSI_STAGE")
	if stage != "" {
		app = "pepsi-worker " + stage
	}
	err = Run(ctx, fn, Options{DSN: cfg.DSN, AppName: app, In: os.Stdin, Out: os.Stdout, Log: log, Mode: mode, Stage: stage,
		Protocol: EnvProtocol()})
	if err == nil || errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	if errors.Is(err, errConnLost) || pgerr.IsConnectFailure(err) {
		return protocol.NotRun // its messages go back: the database, not they, failed
	}
	return 1
}
