package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listener is the dispatcher's dedicated session: it holds the
// single-dispatcher lock and LISTENs on the ingress channel. It must not be
// used by two goroutines at once.
type Listener struct {
	conn    *pgx.Conn
	channel string
}

// errRecovery is returned by Ping when the server is a read-only standby
// (IsReadOnly holds for it).
var errRecovery = errors.New("server is in recovery (read-only standby)")

// ErrLocked is returned by TryLock when another session holds the lock.
var ErrLocked = errors.New("another dispatcher holds the lock")

// Dial opens the listener session.
func Dial(ctx context.Context, dsn, channel string) (*Listener, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad DSN: %w", err)
	}
	host, _ := os.Hostname()
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("pepsi dispatch pid %d on %s", os.Getpid(), host)
	// No prepared statements (a handful of statements, one every
	// heartbeat): through a pooler in transaction mode CheckSession can
	// then say what is wrong instead of failing on a missing statement.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", DescribeConnect(err))
	}
	return &Listener{conn: conn, channel: channel}, nil
}

// OpenConn opens a connection of its own to dsn, named "what pid N on
// HOST" unless the DSN names it, that prepares no statement (as Dial's:
// behind a pooler in transaction mode a prepared statement would fail
// before a check could say why).
func OpenConn(ctx context.Context, dsn, what string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad DSN: %w", err)
	}
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		host, _ := os.Hostname()
		cfg.RuntimeParams["application_name"] = fmt.Sprintf("%s pid %d on %s", what, os.Getpid(), host)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", DescribeConnect(err))
	}
	return conn, nil
}

// PID is the server process id of the session.
func (l *Listener) PID() uint32 { return l.conn.PgConn().PID() }

// Close ends the session, which also releases the lock.
//
// It releases the single-dispatcher lock first, if it holds it: a closed
// session's locks go only when its server process has ended, a moment
// after the client is gone, and a dispatcher started at once (a restart)
// would find the lock still held.
func (l *Listener) Close(ctx context.Context) error {
	if !l.conn.IsClosed() {
		_, _ = l.conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	}
	return l.conn.Close(ctx)
}

// TryLock takes the single-dispatcher lock, or returns ErrLocked with the
// server pid of the session that holds it (0 when unknown).
//
// A lock that is gone by the time its holder is looked up was being
// released (a dispatcher that just stopped): it is tried again, a few
// times.
func (l *Listener) TryLock(ctx context.Context) (holder int32, err error) {
	for try := 1; ; try++ {
		var ok bool
		if err := l.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(DispatcherLock)).Scan(&ok); err != nil {
			return 0, err
		}
		if ok {
			return 0, nil
		}
		err = l.conn.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND ((classid::bigint << 32) | objid::bigint) = $1`, int64(DispatcherLock)).Scan(&holder)
		if err != nil {
			return 0, err
		}
		if holder != 0 || try == 5 {
			return holder, ErrLocked
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Duration(try) * 20 * time.Millisecond):
		}
	}
}

// ConnLimit is how many sessions the server lets a role without special
// rights open: max_connections less the slots it keeps for superusers and,
// from PostgreSQL 16, for roles with pg_use_reserved_connections.
type ConnLimit struct {
	MaxConnections    int // max_connections
	SuperuserReserved int // superuser_reserved_connections
	Reserved          int // reserved_connections; 0 before PostgreSQL 16
}

// Available is how many sessions ordinary roles may open in all.
func (c ConnLimit) Available() int { return c.MaxConnections - c.SuperuserReserved - c.Reserved }

// ConnectionLimit reads the server's connection settings. It counts no
// session: how many are open changes by the moment; the limit does not.
func (l *Listener) ConnectionLimit(ctx context.Context) (ConnLimit, error) {
	var c ConnLimit
	err := l.conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int,
		coalesce(current_setting('reserved_connections', true)::int, 0)`).Scan(&c.MaxConnections, &c.SuperuserReserved, &c.Reserved)
	return c, err
}

// ConnectionLimitOn is ConnectionLimit on conn, a connection of the
// caller's.
func ConnectionLimitOn(ctx context.Context, conn *pgx.Conn) (ConnLimit, error) {
	return (&Listener{conn: conn}).ConnectionLimit(ctx)
}

// WaitLock blocks until the single-dispatcher lock is free and takes it.
func (l *Listener) WaitLock(ctx context.Context) error {
	_, err := l.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(DispatcherLock))
	return err
}

// Listen LISTENs on the ingress channel. With record (the janitor, see
// TryJanitor) it first records the channel for the NOTIFY trigger;
// without, the channel recorded must be this one: dispatchers that share a
// database share one channel.
func (l *Listener) Listen(ctx context.Context, record bool) error {
	if record {
		if _, err := l.conn.Exec(ctx, "UPDATE pepsi.settings SET ingress_channel = $1 WHERE ingress_channel <> $1", l.channel); err != nil {
			return err
		}
	} else {
		var recorded string
		if err := l.conn.QueryRow(ctx, "SELECT ingress_channel FROM pepsi.settings").Scan(&recorded); err != nil {
			return err
		}
		if recorded != l.channel {
			return fmt.Errorf("INGRESS_CHANNEL %s differs from %s, the channel of the dispatcher doing the janitor's work: dispatchers that share a database must share it", l.channel, recorded)
		}
	}
	_, err := l.conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize())
	return err
}

// Wait blocks until a notification arrives (true), d passes (false), or the
// session fails (error). The session stays usable after a timeout.
func (l *Listener) Wait(ctx context.Context, d time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	// pgx.Conn's WaitForNotification, not PgConn's: notifications that
	// arrive while the session runs a statement (Ping, TryLock) are buffered
	// by pgx.Conn and must wake the next Wait; PgConn's would miss them and
	// leave them to pile up in that buffer forever.
	_, err := l.conn.WaitForNotification(wctx)
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case wctx.Err() != nil && !l.conn.IsClosed():
		return false, nil
	}
	return false, err
}

// Ping runs SELECT 1 on the session: the heartbeat and liveness check. It
// also notices a server that has become a read-only standby.
func (l *Listener) Ping(ctx context.Context) error {
	var ro bool
	if err := l.conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&ro); err != nil {
		return err
	}
	if ro {
		return errRecovery
	}
	return nil
}
