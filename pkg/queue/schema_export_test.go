package queue

import (
	"context"
	"io/fs"

	"github.com/jackc/pgx/v5"
)

// Test-only access to the install of the functions (sql/functions).

// LoadCodeFS reads the functions in fsys's directory functions.
var LoadCodeFS = loadCode

// MigrateCodeForTest is MigrateWith with the functions read from codeFS
// (its directory functions) instead of the embedded ones.
func MigrateCodeForTest(ctx context.Context, conn *pgx.Conn, codeFS fs.FS, o MigrateOptions) ([]Migration, error) {
	o.codeFS = codeFS
	return MigrateWith(ctx, conn, o)
}
