package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoSession is returned by CheckSession when the listener's connection
// is not a server session of its own: a pooler in transaction (or
// statement) mode hands each transaction whichever server connection is
// free, so a LISTEN and a session lock stay behind on one the dispatcher
// no longer has.
var ErrNoSession = errors.New("the dispatcher needs a direct or session-mode connection to PostgreSQL, not a pooler in transaction mode")

// sessionWait bounds each wait of CheckSession: for a server connection
// while another session holds one, and for the NOTIFY to come back. On a
// session of its own either takes milliseconds.
const sessionWait = 5 * time.Second

// sessionCheckChannel is the channel CheckSession notifies itself on.
const sessionCheckChannel = "pepsi_session_check"

// CheckSession makes sure that the listener's connection is a session of
// its own, whose LISTEN hears every notification and whose advisory locks
// stay held, and not a pooler in transaction mode, where both are silently
// lost. It returns an error wrapping ErrNoSession when it is not. It is
// for the start, before the single-dispatcher lock is taken: behind such a
// pooler that lock would be left held by a pooled server connection.
//
// With a second, short-lived connection to the same DSN (the probe):
//
//  1. the listener takes a probe advisory lock of a random key and reads
//     pg_backend_pid();
//  2. the probe opens a transaction, which behind a pooler holds one of
//     its server connections, and reads its pg_backend_pid(): it must not
//     be the listener's;
//  3. the listener, in a transaction of its own, must answer within
//     sessionWait (behind a pooler with no server connection free it would
//     wait), from the same server process, which must hold the probe lock
//     (pg_locks);
//  4. the listener LISTENs on pepsi_session_check, the probe NOTIFYs it,
//     and the notification must reach the listener within sessionWait
//     while it waits with no statement running (behind a pooler the
//     listening server connection is then nobody's, or the prober's).
//
// The listener's connection must be Dial's, which prepares no statement
// (behind a pooler a prepared statement would fail before this could
// say why).
func (l *Listener) CheckSession(ctx context.Context) error {
	cfg := l.conn.Config()
	// The copy carries the listener's notification handler: the probe
	// must not feed the listener's buffer.
	cfg.OnNotification = nil
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	probe, closeProbe, err := probeConn(ctx, cfg, "session check")
	if err != nil {
		return fmt.Errorf("session check: %w", err)
	}
	defer closeProbe()
	noSession := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrNoSession, fmt.Sprintf(format, args...))
	}

	// 1-3: one server process, holding its lock, across transactions.
	var pid int32
	key, err := l.probeLock(ctx, "session check", "pg_backend_pid()", &pid)
	if err != nil {
		return err
	}
	// Behind a pooler the unlock may reach another server connection; the
	// probe lock, of a key nobody else uses, then stays on the one that
	// took it until the pooler closes it, in nobody's way.
	defer l.cleanup(probeUnlockSQL, key)
	tx, err := probe.Begin(ctx)
	if err != nil {
		return fmt.Errorf("session check: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	var other int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&other); err != nil {
		return fmt.Errorf("session check: %w", err)
	}
	if other == pid {
		return noSession("another connection was given its session's server process (pid %d)", pid)
	}
	wctx, cancel := context.WithTimeout(ctx, sessionWait)
	defer cancel()
	var again int32
	var held bool
	err = l.conn.QueryRow(wctx, `SELECT pg_backend_pid(), EXISTS (SELECT FROM pg_locks
		WHERE pid = pg_backend_pid() AND `+probeLockGranted+`)`, key).Scan(&again, &held)
	switch {
	case err != nil && ctx.Err() == nil && wctx.Err() != nil:
		return noSession("its session waited more than %v for a server connection", sessionWait)
	case err != nil:
		return fmt.Errorf("session check: %w", err)
	case again != pid:
		return noSession("its session's server process changed between transactions (pid %d, then %d)", pid, again)
	case !held:
		return noSession("its session's advisory lock was not held by its server process (pid %d)", pid)
	}
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("session check: %w", err)
	}

	// 4: a NOTIFY from another session comes back on the listening one.
	if _, err := l.conn.Exec(ctx, "LISTEN "+sessionCheckChannel); err != nil {
		return fmt.Errorf("session check: %w", err)
	}
	defer l.cleanup("UNLISTEN " + sessionCheckChannel)
	token := fmt.Sprintf("%d %x", os.Getpid(), rand.Uint64())
	if _, err := probe.Exec(ctx, "SELECT pg_notify($1, $2)", sessionCheckChannel, token); err != nil {
		return fmt.Errorf("session check: %w", err)
	}
	nctx, ncancel := context.WithTimeout(ctx, sessionWait)
	defer ncancel()
	for {
		n, err := l.conn.WaitForNotification(nctx)
		switch {
		case err == nil && n.Channel == sessionCheckChannel && n.Payload == token:
			return nil
		case err == nil: // another dispatcher's check, or an early ingress notification
		case ctx.Err() == nil && nctx.Err() != nil && !l.conn.IsClosed():
			return noSession("a NOTIFY it sent itself did not come back on its listening session within %v", sessionWait)
		default:
			return fmt.Errorf("session check: %w", err)
		}
	}
}

// CheckSessionOn runs CheckSession on conn, a connection of the caller's
// that prepares no statement (OpenConn's), as if it were the listener's.
func CheckSessionOn(ctx context.Context, conn *pgx.Conn) error {
	return (&Listener{conn: conn}).CheckSession(ctx)
}

// probeConn opens a check's own short-lived connection with cfg, named
// "pepsi dispatch CHECK pid N on HOST" in pg_stat_activity; done closes
// it without waiting long for the server.
func probeConn(ctx context.Context, cfg *pgx.ConnConfig, check string) (conn *pgx.Conn, done func(), err error) {
	host, _ := os.Hostname()
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("pepsi dispatch %s pid %d on %s", check, os.Getpid(), host)
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", DescribeConnect(err))
	}
	return conn, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(cctx)
	}, nil
}

// probeLock takes an advisory lock of a random key on the listener's
// session for check (named in its errors), and reads the expression also
// into dst in the same statement. The caller releases it with
// l.cleanup(probeUnlockSQL, key).
func (l *Listener) probeLock(ctx context.Context, check, also string, dst any) (key int64, err error) {
	key = rand.Int64()
	var locked bool
	if err := l.conn.QueryRow(ctx, "SELECT "+also+", pg_try_advisory_lock($1)", key).Scan(dst, &locked); err != nil {
		return 0, fmt.Errorf("%s: %w", check, err)
	}
	if !locked {
		return 0, fmt.Errorf("%s: probe lock %d is taken; try again", check, key)
	}
	return key, nil
}

// probeUnlockSQL releases a probe lock.
const probeUnlockSQL = "SELECT pg_advisory_unlock($1)"

// probeLockGranted is the condition on a pg_locks row that it is the
// probe lock of key $1, granted, in the session's own database.
const probeLockGranted = `locktype = 'advisory' AND granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND ((classid::bigint << 32) | objid::bigint) = $1`

// cleanup runs a statement that undoes part of CheckSession on the
// listener, if it still can, without waiting long for it.
func (l *Listener) cleanup(sql string, args ...any) {
	if l.conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, sql, args...)
}
