package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// maxFileSize is the most of a configuration file that is read: 1 MiB,
// far more than any pepsi.conf needs. A path to something without end
// (/dev/zero, a pipe that is never closed) or to a huge file is refused
// once that much is read, rather than read until memory runs out (it gave
// "out of memory" and a Go stack trace).
const maxFileSize = 1 << 20

// Load reads and parses the file at path. An unreadable file is an *Error
// "PATH: cannot read: …" that wraps the cause (errors.Is(err, fs.ErrNotExist)
// works); one over 1 MiB is an *Error too. Unless CONFIG_FILE says
// otherwise, workers are pointed at the absolute path of the file.
func Load(path string) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if c.Dispatch.ConfigFile == path {
		if abs, err := filepath.Abs(path); err == nil {
			c.Dispatch.ConfigFile = abs
		}
	}
	return c, nil
}

// readFile reads at most maxFileSize bytes of path, and refuses it if there
// is more. It reads from what it opened, not by size: a pipe or a device
// has none, and a file may grow meanwhile.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, readError(path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, readError(path, err)
	}
	if len(data) > maxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("more than %d bytes (1 MiB), too large for a configuration file", maxFileSize)}
	}
	return data, nil
}

// readError describes a file that cannot be read without repeating its name.
func readError(path string, err error) *Error {
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	return &Error{File: path, Msg: "cannot read: " + cause.Error(), Err: err}
}

// Resolve finds and loads the configuration. The file is flagPath (from -c)
// if non-empty, else getenv("PEPSI_CONFIG") if non-empty, else DefaultPath.
// A missing DefaultPath is fine when PEPSI_DSN is set (the result then has
// every default and Path ""); a missing file that was named explicitly is an
// error. PEPSI_DSN, when set, overrides the DSN; after that an empty DSN is an
// error. A nil getenv means os.Getenv.
func Resolve(flagPath string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	path, named := flagPath, true
	if path == "" {
		path = getenv("PEPSI_CONFIG")
	}
	if path == "" {
		path, named = DefaultPath, false
	}
	dsn := getenv("PEPSI_DSN")
	c, err := Load(path)
	if err != nil {
		var e *Error
		missing := errors.Is(err, fs.ErrNotExist) && !named
		switch {
		case missing && dsn != "":
			c = Default()
		case missing && errors.As(err, &e):
			e.Msg += " (name a file with -c or PEPSI_CONFIG, or set PEPSI_DSN)"
			return nil, e
		default:
			return nil, err
		}
	}
	if dsn != "" {
		c.DSN = dsn
	}
	if c.DSN == "" {
		return nil, &Error{File: path, Msg: "no database: set [database] DSN in " + path + " or PEPSI_DSN"}
	}
	return c, nil
}
