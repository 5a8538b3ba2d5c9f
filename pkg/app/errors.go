package app

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/config"
)

// Exit statuses, as pepsi(1) documents them.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure: database, I/O, …
	exitUsage   = 2 // a usage or configuration error
)

// usageError is a mistake on the command line: an unknown command or flag,
// a missing or malformed argument. It exits 2, and its report ends with a
// hint to run the command's --help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usage returns a usageError.
func usage(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// invalidError is a command-line value that does not fit the configuration
// (an unconfigured stage, a DSN that does not parse). It exits 2 like a
// configuration error, without the --help hint, which would not help.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

// invalid returns an invalidError.
func invalid(format string, a ...any) error { return &invalidError{fmt.Sprintf(format, a...)} }

// cmdError ties an error to the command that failed ("pepsi migrate
// status"), which prefixes its report and names the --help to run.
type cmdError struct {
	cmd string
	err error
}

func (e *cmdError) Error() string { return e.cmd + ": " + e.err.Error() }
func (e *cmdError) Unwrap() error { return e.err }

// inCommand wraps err, if any, with the name of the command c runs.
func inCommand(c *cli.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce *cmdError
	if errors.As(err, &ce) {
		return err
	}
	return &cmdError{cmd: commandName(c), err: err}
}

// commandName is the name of the command c runs ("pepsi queue purge"),
// or "pepsi".
func commandName(c *cli.Context) string {
	if c != nil && c.Command != nil && c.Command.HelpName != "" {
		return c.Command.HelpName
	}
	return "pepsi"
}

// exitCode maps an error returned by the app to pepsi's exit status.
func exitCode(err error) int {
	var (
		ue *usageError
		ie *invalidError
		ce *config.Error
		ec cli.ExitCoder
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue), errors.As(err, &ie), errors.As(err, &ce):
		return exitUsage
	case errors.As(err, &ec):
		return ec.ExitCode()
	}
	return exitFailure
}

// report writes err to w as one line, "pepsi COMMAND: message" (plus, for
// a usage error, a line naming the --help to run), and returns the exit
// status. An error with an empty message (cli.Exit("", n)) prints nothing.
func report(w io.Writer, err error) int {
	code := exitCode(err)
	if err == nil || err.Error() == "" {
		return code
	}
	var ce *cmdError
	if !errors.As(err, &ce) {
		ce = &cmdError{cmd: "pepsi", err: err}
	}
	if ce.err.Error() == "" {
		return code
	}
	// One line, whatever the error text holds.
	fmt.Fprintln(w, strings.Join(strings.Fields(ce.Error()), " "))
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", ce.cmd)
	}
	return code
}
