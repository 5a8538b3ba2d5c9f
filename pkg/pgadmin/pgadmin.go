// Package pgadmin makes and drops whole databases on a PostgreSQL server:
// the throwaway databases of the tests (pkg/pgtest), the lab (bench/) and
// the demo. The product itself never does.
package pgadmin

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Recreate drops database name on the server of dsn, if it exists, and
// creates it empty.
func Recreate(ctx context.Context, dsn, name string) error {
	if err := Drop(ctx, dsn, name); err != nil {
		return err
	}
	return exec(ctx, dsn, name, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// Drop drops database name on the server of dsn, closing its sessions, if
// it exists.
func Drop(ctx context.Context, dsn, name string) error {
	return exec(ctx, dsn, name, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// exec runs sql on a session of its own on the server of dsn; from the
// postgres database when dsn names database name itself, which cannot be
// dropped from its own session.
func exec(ctx context.Context, dsn, name, sql string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("bad DSN: %w", err)
	}
	if cfg.Database == name {
		cfg.Database = "postgres"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// WithDatabase returns dsn (a URL or key=value string) pointed at database
// name.
func WithDatabase(dsn, name string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			u.Path = "/" + name
			return u.String()
		}
	}
	return dsn + " dbname=" + name
}
