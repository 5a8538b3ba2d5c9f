package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Load reads and parses the file at path. An unreadable file is an *Error
// "PATH: cannot read: …" that wraps the cause (errors.Is(err, fs.ErrNotExist)
// works). Unless CONFIG_FILE says otherwise, workers are pointed at the
// absolute path of the file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, readError(path, err)
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
