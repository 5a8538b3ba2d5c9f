package queue

import (
	"context"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// DispatcherSession is a session that holds or waits for the
// single-dispatcher lock: the running dispatcher, or a standby.
type DispatcherSession struct {
	ServerPID int32  `json:"server_pid"` // the session's server process
	Name      string `json:"name"`       // its application_name, "" when unknown
	PID       int    `json:"pid"`        // the dispatcher's process id, from Name (0 when Name does not say)
	Host      string `json:"host"`       // the dispatcher's host, from Name
	// Since is when the session connected (pg_stat_activity.backend_start):
	// for the holder, when it took the lock, unless it was a standby that
	// waited for it first; nil when the server does not say.
	Since *time.Time `json:"since,omitempty"`
	// WaitingSince is when a standby began to wait (pg_locks.waitstart,
	// PostgreSQL 14 and later); nil for the holder.
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
}

// Dispatchers is who holds the single-dispatcher lock and who waits for it.
type Dispatchers struct {
	Holder   *DispatcherSession  `json:"holder"`   // nil when no dispatcher runs
	Standbys []DispatcherSession `json:"standbys"` // waiting, the longest first
}

// dispatcherNameRE reads the application_name Dial gives the listener session.
var dispatcherNameRE = regexp.MustCompile(`^pepsi dispatch pid (\d+) on (.+)$`)

// dispatcherSessionsSQL lists the sessions that hold or wait for the
// exclusive session lock of Listener (see dispatcherSQL). waitstart is
// read through to_jsonb so that the statement also runs on PostgreSQL 13,
// which does not have the column.
const dispatcherSessionsSQL = `
SELECT l.pid, l.granted, coalesce(a.application_name, ''), a.backend_start,
       (to_jsonb(l) ->> 'waitstart')::timestamptz
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.mode = 'ExclusiveLock' AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = $1
 ORDER BY l.granted DESC, 5 NULLS LAST, a.backend_start, l.pid`

// DispatcherSessions returns the session that holds the single-dispatcher
// lock and those that wait for it (dispatchers started with --standby).
func (db *DB) DispatcherSessions(ctx context.Context) (Dispatchers, error) {
	rows, err := db.pool.Query(ctx, dispatcherSessionsSQL, int64(dispatcherLock))
	if err != nil {
		return Dispatchers{}, err
	}
	out := Dispatchers{Standbys: []DispatcherSession{}}
	var s DispatcherSession
	var granted bool
	_, err = pgx.ForEachRow(rows, []any{&s.ServerPID, &granted, &s.Name, &s.Since, &s.WaitingSince}, func() error {
		x := s
		s.Since, s.WaitingSince = nil, nil // scanned afresh, not into x's
		if m := dispatcherNameRE.FindStringSubmatch(x.Name); m != nil {
			x.PID, _ = strconv.Atoi(m[1])
			x.Host = m[2]
		}
		if granted && out.Holder == nil {
			x.WaitingSince = nil
			out.Holder = &x
		} else if !granted {
			out.Standbys = append(out.Standbys, x)
		}
		return nil
	})
	if err != nil {
		return Dispatchers{}, err
	}
	return out, nil
}
