package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OtherDatabaseError is CheckWorkerDSN's when the stage programs' DSN
// reaches another database than the listener's: every message would fail
// in its stage with whatever its client says of a missing table.
type OtherDatabaseError struct {
	There string // the database the DSN reaches
	Here  string // the listener's
}

// Error says which database the DSN reaches.
func (e *OtherDatabaseError) Error() string {
	if e.There != e.Here {
		return fmt.Sprintf("reaches database %q, not the dispatcher's %q", e.There, e.Here)
	}
	return fmt.Sprintf("reaches a database %q that is not the dispatcher's: another server's, or a standby "+
		"(a lock the dispatcher holds is not seen there)", e.There)
}

// workerDSNWait bounds CheckWorkerDSN's connection and its one statement.
const workerDSNWait = 15 * time.Second

// CheckWorkerDSN makes sure that dsn (WORKER_DSN, what the stage programs
// get) reaches the database of the listener's session. The listener takes
// an advisory lock of a random key, and a connection to dsn must see it
// granted in its own database (pg_locks): only the same database of the
// same server shows it, not a namesake on another server nor a standby.
// That connection runs one plain SELECT and keeps nothing on its session,
// so that it works through a pooler in transaction mode.
//
// It returns an *OtherDatabaseError when dsn reaches another database, and
// the error of pgx otherwise (dsn does not parse, or cannot be connected
// to).
func (l *Listener) CheckWorkerDSN(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol

	var here string
	key, err := l.probeLock(ctx, "WORKER_DSN check", "current_database()", &here)
	if err != nil {
		return err
	}
	defer l.cleanup(probeUnlockSQL, key)

	wctx, cancel := context.WithTimeout(ctx, workerDSNWait)
	defer cancel()
	conn, done, err := probeConn(wctx, cfg, "WORKER_DSN check")
	if err != nil {
		return err
	}
	defer done()
	var there string
	var seen bool
	err = conn.QueryRow(wctx, "SELECT current_database(), EXISTS (SELECT FROM pg_locks WHERE "+probeLockGranted+")", key).Scan(&there, &seen)
	switch {
	case err != nil:
		return fmt.Errorf("WORKER_DSN check: %w", err)
	case seen:
		return nil
	}
	return &OtherDatabaseError{There: there, Here: here}
}
