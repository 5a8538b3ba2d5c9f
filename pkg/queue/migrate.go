package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
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

// Code is the schema's functions and triggers (sql/functions), which
// Migrate installs whole after the numbered migrations whenever the
// database has other ones.
type Code struct {
	Files []CodeFile // in the order they are installed
	Hash  string     // hex SHA-256 of their names and contents
}

// CodeFile is one file of Code.
type CodeFile struct {
	Name string // "20_enqueue.sql"
	SQL  string
}

// codeDir holds the functions in the schema's files; codeFile is the form
// of a name there.
const codeDir = "functions"

var codeFile = regexp.MustCompile(`^\d+_[a-z0-9_]+\.sql$`)

// codeMigration stands for the install of the functions where a Migration
// is told (MigrateOptions.Waiting).
var codeMigration = Migration{Name: "functions"}

// LoadCode returns the embedded functions and triggers.
func LoadCode() (Code, error) { return loadCode(schema.Functions) }

// loadCode reads fsys's functions directory in name order: none when there
// is no such directory. A .sql file named otherwise is an error rather
// than left out.
func loadCode(fsys fs.FS) (Code, error) {
	entries, err := fs.ReadDir(fsys, codeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return Code{}, nil
	}
	if err != nil {
		return Code{}, err
	}
	var c Code
	h := sha256.New()
	for _, e := range entries { // sorted by name
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		if !codeFile.MatchString(e.Name()) {
			return Code{}, fmt.Errorf("%s/%s: want NN_name.sql (a number, then lower-case letters, digits and _)", codeDir, e.Name())
		}
		body, err := fs.ReadFile(fsys, codeDir+"/"+e.Name())
		if err != nil {
			return Code{}, err
		}
		c.Files = append(c.Files, CodeFile{Name: e.Name(), SQL: string(body)})
		fmt.Fprintf(h, "%s\x00%d\x00%s", e.Name(), len(body), body)
	}
	if len(c.Files) > 0 {
		c.Hash = hex.EncodeToString(h.Sum(nil))
	}
	return c, nil
}

const migrationBootstrap = `
CREATE SCHEMA IF NOT EXISTS pepsi;
CREATE TABLE IF NOT EXISTS pepsi.schema_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Migrate applies the migrations the database lacks, under an advisory lock,
// and returns the ones it applied; then, unless the database has them
// already, it installs the functions and triggers (LoadCode). It refuses a
// database whose schema is newer than this binary.
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
	// Waiting, when set, hears of each try that gave up on a lock. The
	// install of the functions is told as a Migration of version 0 named
	// "functions".
	Waiting func(m Migration, try int, err error)
	// Installed, when set, hears that the functions and triggers were
	// installed (not when the database had them already).
	Installed func(c Code)

	fsys   fs.FS // the migrations; schema.Files when nil (tests)
	codeFS fs.FS // the functions, in its directory functions; schema.Functions when nil (tests)
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
	if o.codeFS == nil {
		o.codeFS = schema.Functions
	}
	ms, err := loadMigrations(o.fsys)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return nil, fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock)) //nolint:errcheck
	have, err := checkOwnSchema(ctx, conn)
	if err != nil {
		return nil, err
	}
	var current int
	if have {
		if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM pepsi.schema_migration").Scan(&current); err != nil {
			return nil, err
		}
	} else if len(ms) == 0 {
		if _, err := conn.Exec(ctx, migrationBootstrap); err != nil {
			return nil, fmt.Errorf("create migration table: %w", err)
		}
	}
	if current > len(ms) {
		return nil, fmt.Errorf("database schema is at version %d, newer than this pepsi knows (%d): upgrade pepsi", current, len(ms))
	}
	code, err := loadCode(o.codeFS)
	if err != nil {
		return nil, err
	}
	var applied []Migration
	for i, m := range ms[current:] {
		// A fresh database gets the migrations' table with its first
		// migration, in one transaction: a failed migrate leaves nothing.
		if err := applyMigration(ctx, conn, m, o, !have && i == 0); err != nil {
			return applied, fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m)
	}
	installed, err := installCode(ctx, conn, code, o)
	if err != nil {
		return applied, fmt.Errorf("functions: %w", err)
	}
	if installed && o.Installed != nil {
		o.Installed(code)
	}
	return applied, nil
}

// checkOwnSchema reports whether the database has pepsi's migrations
// table, and refuses a schema pepsi without it that holds anything: it is
// someone else's, and a migrate into it would fail half-way or mix
// pepsi's tables with theirs. An empty schema pepsi (made beforehand, to
// choose its owner) is taken.
func checkOwnSchema(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var have bool
	var n int64
	var first string
	err := conn.QueryRow(ctx, `SELECT to_regclass('pepsi.schema_migration') IS NOT NULL, count(*), coalesce(min(name), '') FROM (
		SELECT relname::text AS name FROM pg_class WHERE relnamespace = to_regnamespace('pepsi')
		UNION ALL SELECT proname || '()' FROM pg_proc WHERE pronamespace = to_regnamespace('pepsi')
		UNION ALL SELECT typname::text FROM pg_type
		 WHERE typnamespace = to_regnamespace('pepsi') AND typrelid = 0 AND typcategory <> 'A') o`).Scan(&have, &n, &first)
	if err != nil {
		return false, fmt.Errorf("look at the schema pepsi: %w", err)
	}
	if !have && n > 0 {
		more := ""
		if n > 1 {
			more = fmt.Sprintf(" and %d more", n-1)
		}
		return false, fmt.Errorf("schema pepsi exists and is not pepsi's: it holds pepsi.%s%s and no pepsi.schema_migration; "+
			"nothing was created: migrate another database, or rename or drop that schema", first, more)
	}
	return have, nil
}

// applyMigration runs m and records it, in one transaction (lockedTx),
// after creating the migrations' table when bootstrap is set.
func applyMigration(ctx context.Context, conn *pgx.Conn, m Migration, o MigrateOptions, bootstrap bool) error {
	return lockedTx(ctx, conn, m, o, func(tx pgx.Tx) error {
		if bootstrap {
			if _, err := tx.Exec(ctx, migrationBootstrap); err != nil {
				return fmt.Errorf("create migration table: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO pepsi.schema_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
		return err
	})
}

// installCode installs c, every file in order, and records its hash, in
// one transaction (lockedTx), unless the database records that hash
// already: then it reads one row of pepsi.schema_code and locks nothing
// that dispatchers use. It reports whether it installed c.
func installCode(ctx context.Context, conn *pgx.Conn, c Code, o MigrateOptions) (bool, error) {
	if len(c.Files) == 0 {
		return false, nil
	}
	var have string
	err := conn.QueryRow(ctx, "SELECT hash FROM pepsi.schema_code").Scan(&have)
	switch {
	case err == nil && have == c.Hash:
		return false, nil
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return false, err
	}
	m := codeMigration
	for _, f := range c.Files {
		m.SQL += "-- " + f.Name + "\n" + f.SQL
	}
	return true, lockedTx(ctx, conn, m, o, func(tx pgx.Tx) error {
		for _, f := range c.Files {
			if _, err := tx.Exec(ctx, f.SQL); err != nil {
				return fmt.Errorf("%s/%s: %w", codeDir, f.Name, err)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO pepsi.schema_code (hash) VALUES ($1)
			ON CONFLICT (one) DO UPDATE SET hash = excluded.hash, installed_at = now()`, c.Hash)
		return err
	})
}

// lockedTx runs body in one transaction whose lock waits are bounded by
// o.LockTimeout, trying again after a lock timeout with a pause of about
// the same length, so running dispatchers get the tables back between
// tries; m is what o.Waiting is told of.
func lockedTx(ctx context.Context, conn *pgx.Conn, m Migration, o MigrateOptions, body func(pgx.Tx) error) error {
	timeout := fmt.Sprintf("SET LOCAL lock_timeout = %d", o.LockTimeout.Milliseconds())
	for try := 1; ; try++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, timeout); err != nil {
				return err
			}
			return body(tx)
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
	// At this version the migrations made pepsi.schema_code; a migrate
	// that stopped before the functions leaves it empty.
	var installed bool
	if err := db.pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pepsi.schema_code)").Scan(&installed); err != nil {
		return err
	}
	if !installed {
		return fmt.Errorf("database schema is at version %d, but its functions were never installed: run 'pepsi migrate'", current)
	}
	return nil
}

// CodeStatus returns the hash of the functions and triggers the database
// has (LoadCode's Hash when they are this pepsi's; "" when none were
// installed) and when they were installed.
func CodeStatus(ctx context.Context, conn *pgx.Conn) (string, *time.Time, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('pepsi.schema_code') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return "", nil, err
	}
	var hash string
	var at time.Time
	err := conn.QueryRow(ctx, "SELECT hash, installed_at FROM pepsi.schema_code").Scan(&hash, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	return hash, &at, nil
}
