package worker

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Connect makes the connection Run would make for dsn, and says whether
// it found a pooler in front of the server.
func Connect(ctx context.Context, dsn string) (conn *pgx.Conn, pooled bool, err error) {
	cfg, auto, err := connConfig(dsn, "")
	if err != nil {
		return nil, false, err
	}
	if conn, err = connect(ctx, cfg, auto); err != nil {
		return nil, false, err
	}
	if auto {
		pooled, err = behindPooler(ctx, conn.PgConn())
	}
	return conn, pooled, err
}
