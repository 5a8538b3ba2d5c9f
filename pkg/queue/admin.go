package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LockHolder is the session that holds the single-dispatcher lock: what the
// database knows of the running dispatcher.
type LockHolder struct {
	PID  int32  // server pid of the session holding the single-dispatcher lock
	Name string // its application_name ("pepsi dispatch pid N on HOST"), "" when unknown
}

// String describes the dispatcher for a message.
func (d *LockHolder) String() string {
	if d.Name != "" {
		return fmt.Sprintf("%s, server pid %d", d.Name, d.PID)
	}
	return fmt.Sprintf("server pid %d", d.PID)
}

// dispatcherSQL finds the session holding the single-dispatcher lock (the
// exclusive session lock of Listener.TryLock; the shared transaction locks
// that Redrive and Purge take are not it). A standby that waits for the
// lock is not granted it and does not count.
const dispatcherSQL = `
SELECT l.pid, coalesce(a.application_name, '')
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock' AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
 LIMIT 1`

// LockHolder returns the session that holds the lock, or nil
// when none runs. A dispatcher that is reconnecting after losing its
// session holds no lock until it has reconnected.
func (db *DB) LockHolder(ctx context.Context) (*LockHolder, error) {
	var d LockHolder
	err := db.pool.QueryRow(ctx, dispatcherSQL, int64(dispatcherLock)).Scan(&d.PID, &d.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// Now returns the server's clock, for ages that do not depend on the
// client's.
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := db.pool.QueryRow(ctx, "SELECT now()").Scan(&now)
	return now, err
}
