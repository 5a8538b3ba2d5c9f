// Package sql holds pepsi's schema migrations, embedded in the binary.
//
// Each file is NNN_name.sql; versions start at 1 and have no gaps.
package sql

import "embed"

// Files holds the migration files.
//
//go:embed *.sql
var Files embed.FS
