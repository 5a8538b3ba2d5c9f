// Command pepsi is the PostgreSQL-backed pipeline coordinator: one binary
// for every command, also callable as pepsi-dispatch, pepsi-migrate, … (a
// symlink per command). All the work is in package app.
package main

import (
	"os"

	"github.com/pepsi-dev/pepsi/pkg/app"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() { os.Exit(app.Main(os.Args, version)) }
