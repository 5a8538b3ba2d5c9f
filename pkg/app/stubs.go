package app

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// errNotImplemented is what a command that is not written yet returns.
var errNotImplemented = errors.New("not implemented yet")

func notImplemented(*cli.Context) error { return errNotImplemented }

func httpdCommand() *cli.Command {
	return &cli.Command{
		Name:   "httpd",
		Usage:  "serve the queue and statistics over HTTP",
		Action: notImplemented,
	}
}
