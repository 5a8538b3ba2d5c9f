package app

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:   "version",
		Usage:  "print the version of pepsi",
		Action: printVersion,
	}
}

// printVersion prints "pepsi VERSION".
func printVersion(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	_, err := fmt.Fprintf(c.App.Writer, "pepsi %s\n", c.App.Version)
	return err
}
