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
	// Set: a dispatcher of a stage set (it holds the database-wide lock
	// shared); others may own other stages (see Owners).
	Set bool
}

// String describes the dispatcher for a message.
func (d *LockHolder) String() string {
	if d.Name != "" {
		return fmt.Sprintf("%s, server pid %d", d.Name, d.PID)
	}
	return fmt.Sprintf("server pid %d", d.PID)
}

// holderSQL finds a session holding the database-wide lock: exclusive (a
// dispatcher that owns every stage, Listener.TakeStages) or, held by a
// dispatcher's session, shared (one with a stage set; the shared
// transaction locks that Redrive and Purge take are not it). A standby
// that waits for the lock is not granted it and does not count.
const holderSQL = `
SELECT l.pid, coalesce(a.application_name, ''), l.mode
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
   AND (l.mode = 'ExclusiveLock' OR a.application_name LIKE 'pepsi dispatch pid %')
 ORDER BY l.mode = 'ExclusiveLock' DESC, l.pid
 LIMIT 1`

// LockHolder returns the session of a running dispatcher (the one that
// owns every stage, or one of those with a stage set), or nil when none
// runs. A dispatcher that is reconnecting after losing its session holds
// no lock until it has reconnected.
func (db *DB) LockHolder(ctx context.Context) (*LockHolder, error) {
	var d LockHolder
	var mode string
	err := db.pool.QueryRow(ctx, holderSQL, int64(dispatcherLock)).Scan(&d.PID, &d.Name, &mode)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d.Set = mode != "ExclusiveLock"
	return &d, nil
}

// Now returns the server's clock, for ages that do not depend on the
// client's.
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := db.pool.QueryRow(ctx, "SELECT now()").Scan(&now)
	return now, err
}

// Empty deletes every message, queued, finished or not yet admitted (a
// benchmark's reset between runs). A dispatcher may be running: its
// admission and retention sweep lock pepsi.state and pepsi.message in other
// orders than the TRUNCATE does, and a deadlock between them is retried.
func (db *DB) Empty(ctx context.Context) error {
	return retry(ctx, func() error {
		_, err := db.pool.Exec(ctx, "TRUNCATE pepsi.state, pepsi.message, pepsi.ingress")
		return err
	})
}
