package queue

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	schema "github.com/pepsi-dev/pepsi/sql"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// MigrationStatus is a migration and when it was applied, if it was.
type MigrationStatus struct {
	Migration
	AppliedAt *time.Time
}

var migrationFile = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.sql$`)

// Migrations returns the embedded migrations in order, rejecting gaps and
// duplicates.
func Migrations() ([]Migration, error) { return loadMigrations(schema.Files) }

func loadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: m[2], SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %03d_%s: expected version %d (gap or duplicate)", m.Version, m.Name, i+1)
		}
	}
	return ms, nil
}

const migrationBootstrap = `
CREATE SCHEMA IF NOT EXISTS pepsi;
CREATE TABLE IF NOT EXISTS pepsi.schema_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Migrate applies the migrations the database lacks, under an advisory lock,
// and returns the ones it applied. It refuses a database whose schema is
// newer than this binary.
func Migrate(ctx context.Context, conn *pgx.Conn) ([]Migration, error) {
	return MigrateWith(ctx, conn, MigrateOptions{})
}

// MigrateOptions bounds how a migration waits for the tables it changes.
type MigrateOptions struct {
	// LockTimeout is the longest one try waits for a table lock
	// (default DefaultMigrateLockTimeout): a DDL statement queued behind a
	// dispatcher's transaction would queue the dispatcher's next one behind
	// itself, so it gives up soon and tries again.
	LockTimeout time.Duration
	// Tries is how many times a migration is tried (default
	// DefaultMigrateTries) before Migrate gives up.
	Tries int
	// Waiting, when set, hears of each try that gave up on a lock.
	Waiting func(m Migration, try int, err error)

	fsys fs.FS // the migrations; schema.Files when nil (tests)
}

// The defaults of MigrateOptions: a try stalls the hot path for at most a
// second, and a minute or so of tries rides out long transactions.
const (
	DefaultMigrateLockTimeout = time.Second
	DefaultMigrateTries       = 30
)

// ErrMigrateLocked is returned (wrapped) when a migration found its
// tables locked on every try.
var ErrMigrateLocked = errors.New("its tables stayed locked")

// MigrateWith is Migrate with options.
func MigrateWith(ctx context.Context, conn *pgx.Conn, o MigrateOptions) ([]Migration, error) {
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultMigrateLockTimeout
	}
	if o.Tries <= 0 {
		o.Tries = DefaultMigrateTries
	}
	if o.fsys == nil {
		o.fsys = schema.Files
	}
	ms, err := loadMigrations(o.fsys)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return nil, fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock)) //nolint:errcheck
	if _, err := conn.Exec(ctx, migrationBootstrap); err != nil {
		return nil, fmt.Errorf("create migration table: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM pepsi.schema_migration").Scan(&current); err != nil {
		return nil, err
	}
	if current > len(ms) {
		return nil, fmt.Errorf("database schema is at version %d, newer than this pepsi knows (%d): upgrade pepsi", current, len(ms))
	}
	var applied []Migration
	for _, m := range ms[current:] {
		if err := applyMigration(ctx, conn, m, o); err != nil {
			return applied, fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m)
	}
	return applied, nil
}

// applyMigration runs m in one transaction whose lock waits are bounded by
// o.LockTimeout, trying again after a lock timeout with a pause of about
// the same length, so running dispatchers get the tables back between tries.
func applyMigration(ctx context.Context, conn *pgx.Conn, m Migration, o MigrateOptions) error {
	timeout := fmt.Sprintf("SET LOCAL lock_timeout = %d", o.LockTimeout.Milliseconds())
	for try := 1; ; try++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, timeout); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO pepsi.schema_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != pgerrcode.LockNotAvailable {
			return err
		}
		if try >= o.Tries {
			return fmt.Errorf("%w for %d tries of %s (%s): stop the dispatchers and run pepsi migrate again",
				ErrMigrateLocked, o.Tries, o.LockTimeout, pe.Message)
		}
		if o.Waiting != nil {
			o.Waiting(m, try, err)
		}
		pause := o.LockTimeout/2 + rand.N(o.LockTimeout)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// MigrateStatus lists every known migration with its applied time, and the
// highest version the database records (which may exceed what is known).
func MigrateStatus(ctx context.Context, conn *pgx.Conn) ([]MigrationStatus, int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, 0, err
	}
	out := make([]MigrationStatus, len(ms))
	for i, m := range ms {
		out[i].Migration = m
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('pepsi.schema_migration') IS NOT NULL").Scan(&exists); err != nil {
		return nil, 0, err
	}
	if !exists {
		return out, 0, nil
	}
	rows, err := conn.Query(ctx, "SELECT version, applied_at FROM pepsi.schema_migration ORDER BY version")
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var current int
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, 0, err
		}
		current = max(current, v)
		if v >= 1 && v <= len(out) {
			out[v-1].AppliedAt = &at
		}
	}
	return out, current, rows.Err()
}

// CheckSchema returns an error unless the database is migrated to exactly
// the version this binary knows.
func (db *DB) CheckSchema(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	// Two statements: a query naming pepsi.schema_migration fails at parse
	// time when the table does not exist, whatever a CASE around it says.
	var exists bool
	if err := db.pool.QueryRow(ctx, "SELECT to_regclass('pepsi.schema_migration') IS NOT NULL").Scan(&exists); err != nil {
		return err
	}
	var current int
	if exists {
		if err := db.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM pepsi.schema_migration").Scan(&current); err != nil {
			return err
		}
	}
	switch {
	case current < len(ms):
		return fmt.Errorf("database schema is at version %d, this pepsi needs %d: run 'pepsi migrate'", current, len(ms))
	case current > len(ms):
		return fmt.Errorf("database schema is at version %d, newer than this pepsi knows (%d): upgrade pepsi", current, len(ms))
	}
	return nil
}
