// Package app is the pepsi command line: one urfave/cli application whose
// subcommands (dispatch, enqueue, queue, stats, migrate, httpd, doctor,
// version)
// are reachable as "pepsi COMMAND" or, busybox style, through a symlink
// named "pepsi-COMMAND".
//
// Conventions every command follows:
//
//   - -c/--config FILE is accepted before and after the command name
//     (pepsi -c f migrate, pepsi migrate -c f, pepsi migrate status -c f):
//     every command defines the flag, and the one given nearest to the
//     command that runs wins. Without it, config.Resolve falls back to
//     $PEPSI_CONFIG, then /etc/pepsi/pepsi.conf; $PEPSI_DSN overrides the DSN.
//   - Flags come before positional arguments (Go flag parsing stops at the
//     first argument).
//   - Exit status 0 on success, 1 on a runtime failure, 2 on a usage or
//     configuration error. An error is one line on stderr, "pepsi COMMAND:
//     message"; a usage error adds one line naming the --help to run.
package app

import (
	"context"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/config"
)

// Main runs pepsi with argv args and returns the exit status. argv[0] may
// be an alias (see resolveAlias).
func Main(args []string, version string) int {
	return run(args, version, os.Stdout, os.Stderr, os.Stdin)
}

// run is Main with its streams as arguments, for tests. "pepsi
// __complete …" (or "pepsi-COMMAND __complete …") is the shell completion
// hook: see complete.
func run(args []string, version string, stdout, stderr io.Writer, stdin io.Reader) int {
	app := New(version, stdout, stderr, stdin)
	if len(args) > 1 && args[1] == completeArg {
		words := resolveAlias(append([]string{args[0]}, args[2:]...))[1:]
		complete(app, words, stdout)
		return 0
	}
	return report(stderr, app.RunContext(context.Background(), resolveAlias(args)))
}

// New builds the pepsi application writing to stdout and stderr and
// reading stdin. Its Run returns the error to report (see report and
// exitCode); it never exits the process itself. Commands are built by one
// function each (dispatchCommand, …) and use c.App.Writer, c.App.ErrWriter
// and c.App.Reader as their streams, never os.Stdout and friends.
func New(version string, stdout, stderr io.Writer, stdin io.Reader) *cli.App {
	app := &cli.App{
		Name:      "pepsi",
		HelpName:  "pepsi", // not argv[0]: help reads the same under every alias
		Usage:     "PostgreSQL-backed pipeline coordinator",
		UsageText: "pepsi [-c FILE] COMMAND [options] [arguments]\npepsi-COMMAND [options] [arguments]",
		Version:   version,
		Commands: []*cli.Command{
			dispatchCommand(),
			enqueueCommand(),
			queueCommand(),
			statsCommand(),
			migrateCommand(),
			httpdCommand(),
			doctorCommand(),
			versionCommand(),
		},
		Flags: []cli.Flag{
			configFlag(),
			&cli.BoolFlag{Name: "version", Usage: "print the version and exit", DisableDefaultText: true},
		},
		Action:          rootAction,
		HideVersion:     true, // --version is our own flag; no -v
		HideHelpCommand: true, // "pepsi help [COMMAND]" is handled by rootAction
		Writer:          stdout,
		ErrWriter:       stderr,
		Reader:          stdin,
		// Run returns every error; Main prints it and picks the exit status.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	app.OnUsageError = onUsageError
	for _, cmd := range app.Commands {
		prepare(cmd)
	}
	return app
}

// prepare gives cmd and its subcommands what every command has: the
// -c/--config flag (prepended), usage errors that exit 2 without a screen of help, no
// "help" subcommand (-h/--help remains), and errors prefixed with the
// command's name.
func prepare(cmd *cli.Command) {
	cmd.Flags = append([]cli.Flag{configFlag()}, cmd.Flags...)
	cmd.OnUsageError = onUsageError
	cmd.HideHelpCommand = true
	if act := cmd.Action; act != nil {
		cmd.Action = func(c *cli.Context) error { return inCommand(c, act(c)) }
	}
	for _, sub := range cmd.Subcommands {
		prepare(sub)
	}
}

// configFlag is -c/--config; a new one each time, as a flag value belongs
// to one command.
func configFlag() cli.Flag {
	return &cli.StringFlag{
		Name:      "config",
		Aliases:   []string{"c"},
		Usage:     "read the configuration from `FILE` (default: $PEPSI_CONFIG, else " + config.DefaultPath + ")",
		TakesFile: true,
	}
}

// onUsageError turns a flag parsing error into a usage error (exit 2).
func onUsageError(c *cli.Context, err error, _ bool) error {
	return inCommand(c, usage("%v", err))
}

// rootAction runs when no command is named: --version, "help [COMMAND]",
// an unknown command, or nothing at all (help, exit 2).
func rootAction(c *cli.Context) error {
	args := c.Args()
	switch {
	case c.Bool("version"):
		return printVersion(c)
	case args.First() == "help" && args.Len() == 1:
		return cli.ShowAppHelp(c)
	case args.First() == "help":
		// "pepsi help migrate status" is "pepsi migrate status --help".
		cmd := c.App.Command(args.Get(1))
		if cmd == nil {
			return inCommand(c, usage("no such command %q", args.Get(1)))
		}
		sub := cli.NewContext(c.App, nil, c)
		sub.Command = cmd
		return cmd.Run(sub, append(args.Tail(), "--help")...)
	case args.Present():
		return inCommand(c, usage("unknown command %q", args.First()))
	}
	_ = cli.ShowAppHelp(c)
	return cli.Exit("", exitUsage)
}

// configPath returns the -c value given nearest to the running command, or
// "" when there is none.
func configPath(c *cli.Context) string {
	for _, ctx := range c.Lineage() {
		if ctx.Command == nil {
			continue
		}
		for _, name := range ctx.LocalFlagNames() {
			if name == "config" || name == "c" {
				return ctx.String("config")
			}
		}
	}
	return ""
}

// loadConfig resolves and loads the configuration for the running command.
func loadConfig(c *cli.Context) (*config.Config, error) {
	return config.Resolve(configPath(c), os.Getenv)
}
