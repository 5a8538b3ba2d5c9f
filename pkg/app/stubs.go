package app

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// errNotImplemented is what a command that is not written yet returns.
var errNotImplemented = errors.New("not implemented yet")

func notImplemented(*cli.Context) error { return errNotImplemented }

func queueCommand() *cli.Command {
	return &cli.Command{
		Name:   "queue",
		Usage:  "inspect and repair the queue (ls, show, summary, retry, purge)",
		Action: notImplemented,
	}
}

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:   "stats",
		Usage:  "print stage and dispatcher statistics",
		Action: notImplemented,
	}
}

func httpdCommand() *cli.Command {
	return &cli.Command{
		Name:   "httpd",
		Usage:  "serve the queue and statistics over HTTP",
		Action: notImplemented,
	}
}
