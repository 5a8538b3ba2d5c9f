package admin

// What `pepsi doctor` reads of the server: each function here is one
// check's data, read without changing anything (the round trip of
// NotifyRoundTrip wakes the dispatchers once, as any enqueue would). The
// queue's health is judged in health.go; the verdicts on the server
// (schema, locks, vacuum, notifications, poolers, connections) are
// pkg/app's.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// SchemaStatus is queue.MigrateStatus on one of db's connections: every
// known migration with when it was applied, and the highest version
// recorded.
func (db *DB) SchemaStatus(ctx context.Context) ([]queue.MigrationStatus, int, error) {
	c, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer c.Release()
	return queue.MigrateStatus(ctx, c.Conn())
}

// HeldSession is a session of this database that keeps VACUUM from
// reclaiming dead rows: idle in a transaction, or holding a snapshot (its
// xmin) for longer than a threshold.
type HeldSession struct {
	PID   int32  `json:"server_pid"`
	Name  string `json:"application_name"`
	User  string `json:"user"`
	State string `json:"state"` // pg_stat_activity.state: "idle in transaction", "active", …
	// For is how long it has been so: since its state changed when idle in
	// a transaction, else since its transaction began.
	For time.Duration `json:"for_ns"`
	// XminAge is how many transactions its snapshot is behind (age of
	// backend_xmin); 0 when it holds none.
	XminAge int64 `json:"xmin_age"`
	// LockWait: it waits for an advisory lock in one statement, whose
	// snapshot it holds all the while (a --standby polls instead).
	LockWait bool   `json:"advisory_lock_wait"`
	Query    string `json:"query"` // its last statement, cut at 80 bytes
}

// HeldSlot is a replication slot that holds back the horizon while nothing
// reads it.
type HeldSlot struct {
	Name string `json:"name"`
	Type string `json:"type"` // physical or logical
}

// HeldPrepared is a prepared transaction (PREPARE TRANSACTION) older than
// the threshold: it holds its snapshot until it is committed or rolled
// back, whoever prepared it.
type HeldPrepared struct {
	GID   string        `json:"gid"`
	Owner string        `json:"owner"`
	For   time.Duration `json:"for_ns"`
}

// XminHolders is what keeps VACUUM from reclaiming this database's dead
// rows for longer than a threshold.
type XminHolders struct {
	Sessions []HeldSession  `json:"sessions"`
	Slots    []HeldSlot     `json:"slots"`
	Prepared []HeldPrepared `json:"prepared"`
}

// Empty reports whether nothing holds the horizon back.
func (x XminHolders) Empty() bool {
	return len(x.Sessions) == 0 && len(x.Slots) == 0 && len(x.Prepared) == 0
}

// heldSessionsSQL lists the sessions of this database, other than the
// caller's, idle in a transaction for longer than $1, or whose snapshot
// (backend_xmin) is part of a transaction older than $1. Only sessions of
// this database count: VACUUM of a table that is not shared looks at no
// other (PostgreSQL 13 and later).
const heldSessionsSQL = `
SELECT pid, coalesce(application_name, ''), coalesce(usename, ''), coalesce(state, ''),
       extract(epoch FROM CASE WHEN state LIKE 'idle in transaction%' THEN now() - state_change
                               ELSE now() - xact_start END)::float8,
       coalesce(age(backend_xmin), 0)::bigint,
       coalesce(wait_event_type = 'Lock' AND wait_event = 'advisory', false),
       left(coalesce(query, ''), 80)
  FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND ((state LIKE 'idle in transaction%' AND state_change < now() - $1::interval)
     OR (backend_xmin IS NOT NULL AND xact_start < now() - $1::interval))
 ORDER BY coalesce(xact_start, state_change), pid`

// XminHolders returns the sessions, replication slots and prepared
// transactions that hold this database's VACUUM horizon back: sessions idle
// in a transaction for longer than threshold or in a transaction with a
// snapshot older than it, slots that hold an xmin while no one reads them,
// and transactions prepared longer ago than threshold.
func (db *DB) XminHolders(ctx context.Context, threshold time.Duration) (XminHolders, error) {
	out := XminHolders{Sessions: []HeldSession{}, Slots: []HeldSlot{}, Prepared: []HeldPrepared{}}
	rows, err := db.pool.Query(ctx, heldSessionsSQL, threshold)
	if err != nil {
		return out, err
	}
	var s HeldSession
	var secs float64
	_, err = pgx.ForEachRow(rows, []any{&s.PID, &s.Name, &s.User, &s.State, &secs, &s.XminAge, &s.LockWait, &s.Query}, func() error {
		s.For = time.Duration(secs * float64(time.Second))
		out.Sessions = append(out.Sessions, s)
		return nil
	})
	if err != nil {
		return out, err
	}
	rows, err = db.pool.Query(ctx, `SELECT slot_name::text, slot_type FROM pg_replication_slots
		WHERE NOT active AND (xmin IS NOT NULL OR catalog_xmin IS NOT NULL)
		  AND (database IS NULL OR database = current_database()) ORDER BY slot_name`)
	if err != nil {
		return out, err
	}
	var sl HeldSlot
	if _, err = pgx.ForEachRow(rows, []any{&sl.Name, &sl.Type}, func() error {
		out.Slots = append(out.Slots, sl)
		return nil
	}); err != nil {
		return out, err
	}
	rows, err = db.pool.Query(ctx, `SELECT gid, owner::text, extract(epoch FROM now() - prepared)::float8 FROM pg_prepared_xacts
		WHERE database = current_database() AND prepared < now() - $1::interval ORDER BY prepared`, threshold)
	if err != nil {
		return out, err
	}
	var p HeldPrepared
	_, err = pgx.ForEachRow(rows, []any{&p.GID, &p.Owner, &secs}, func() error {
		p.For = time.Duration(secs * float64(time.Second))
		out.Prepared = append(out.Prepared, p)
		return nil
	})
	return out, err
}

// TableHealth is what the server's statistics and settings say of one of
// the queue's tables.
type TableHealth struct {
	Table string `json:"table"`
	Live  int64  `json:"live_rows"`
	Dead  int64  `json:"dead_rows"`
	Bytes int64  `json:"bytes"` // the table with its indexes and TOAST
	// AutovacuumOff: its storage parameter autovacuum_enabled is false.
	AutovacuumOff bool `json:"autovacuum_off"`
	// LastVacuum is the latest of its last VACUUM and autovacuum; nil when
	// the statistics know of none.
	LastVacuum *time.Time `json:"last_vacuum,omitempty"`
}

// VacuumSettings are the server's settings that decide whether anything
// vacuums the queue's tables on its own.
type VacuumSettings struct {
	Autovacuum  bool `json:"autovacuum"`   // the server's autovacuum
	TrackCounts bool `json:"track_counts"` // without it autovacuum knows of no dead rows
}

// VacuumSettings reads the server's autovacuum and track_counts.
func (db *DB) VacuumSettings(ctx context.Context) (VacuumSettings, error) {
	var s VacuumSettings
	err := db.pool.QueryRow(ctx, `SELECT current_setting('autovacuum')::bool, current_setting('track_counts')::bool`).Scan(&s.Autovacuum, &s.TrackCounts)
	return s, err
}

// TableHealth reads table's (one of queue.Vacuumed) row counts, size, last
// vacuum and whether autovacuum is off for it.
func (db *DB) TableHealth(ctx context.Context, table string) (TableHealth, error) {
	h := TableHealth{Table: table}
	err := db.pool.QueryRow(ctx, `
SELECT coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), pg_total_relation_size(c.oid),
       coalesce((SELECT NOT o.option_value::bool FROM pg_options_to_table(c.reloptions) o
                  WHERE o.option_name = 'autovacuum_enabled'), false),
       greatest(s.last_vacuum, s.last_autovacuum)
  FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.oid = $1::regclass`, table).Scan(&h.Live, &h.Dead, &h.Bytes, &h.AutovacuumOff, &h.LastVacuum)
	if err != nil {
		return h, fmt.Errorf("read %s statistics: %w", table, err)
	}
	return h, nil
}

// IngressChannel is the channel recorded in pepsi.settings: the one the
// triggers and pepsi.enqueue() notify.
func (db *DB) IngressChannel(ctx context.Context) (string, error) {
	var ch string
	err := db.pool.QueryRow(ctx, "SELECT ingress_channel FROM pepsi.settings").Scan(&ch)
	return ch, err
}

// RoundTrip is how a NOTIFY went: how long it took to come back to a
// session listening on its channel, and how full the server's notification
// queue is.
type RoundTrip struct {
	Took time.Duration `json:"took_ns"`
	// QueueUsage is pg_notification_queue_usage(): the fraction of the
	// server's notification queue in use, 0 to 1. It fills when a session
	// that LISTENs stays in one transaction; NOTIFY fails once it is full.
	QueueUsage float64 `json:"queue_usage"`
}

// ErrNoNotification is NotifyRoundTrip's error when its notification did
// not come back within the wait.
var ErrNoNotification = errors.New("the notification did not come back")

// NotifyRoundTrip LISTENs on channel on a connection of its own to dsn,
// sends a NOTIFY on channel with a payload of its own from db, and waits
// up to wait for it to come back. Dispatchers listening on the channel
// wake once, as for any enqueue; they read no payload.
func (db *DB) NotifyRoundTrip(ctx context.Context, dsn, channel string, wait time.Duration) (RoundTrip, error) {
	var rt RoundTrip
	conn, err := queue.OpenConn(ctx, dsn, "pepsi doctor listen")
	if err != nil {
		return rt, err
	}
	defer closeQuietly(conn)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return rt, err
	}
	payload := fmt.Sprintf("pepsi doctor %d %x", os.Getpid(), rand.Uint64())
	start := time.Now()
	if err := db.pool.QueryRow(ctx, "SELECT pg_notify($1, $2), pg_notification_queue_usage()", channel, payload).Scan(nil, &rt.QueueUsage); err != nil {
		return rt, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err == nil && n.Channel == channel && n.Payload == payload:
			rt.Took = time.Since(start)
			return rt, nil
		case err == nil: // an enqueue's, or another doctor's
		case ctx.Err() == nil && wctx.Err() != nil:
			return rt, fmt.Errorf("%w within %v", ErrNoNotification, wait)
		default:
			return rt, err
		}
	}
}

// Pooler is what CheckPooler found between the client and the server.
type Pooler struct {
	// Pooled: the connection's cancel key names another process than the
	// server's pg_backend_pid(): something (PgBouncer, Pgpool, a proxy)
	// stands between, which hands out keys of its own.
	Pooled     bool  `json:"pooled"`
	BackendPID int32 `json:"backend_pid"` // pg_backend_pid() as the server says
	KeyPID     int32 `json:"key_pid"`     // the pid of the connection's cancel key
	// NoSession is the dispatcher's session check's refusal (an error
	// wrapping queue.ErrNoSession): a pooler in transaction or statement mode,
	// through which a dispatcher's LISTEN and locks are lost; nil when the
	// check passed.
	NoSession error `json:"-"`
}

// CheckPooler connects to dsn as the dispatcher does and runs the
// dispatcher's own session check (queue.Listener.CheckSession) on that
// connection, and says whether a pooler stands in front of the server.
// An error is one that kept it from checking (a failed connection).
func CheckPooler(ctx context.Context, dsn string) (Pooler, error) {
	var p Pooler
	conn, err := queue.OpenConn(ctx, dsn, "pepsi doctor session check")
	if err != nil {
		return p, err
	}
	defer closeQuietly(conn)
	p.KeyPID = int32(conn.PgConn().PID())
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p.BackendPID); err != nil {
		return p, err
	}
	p.Pooled = p.KeyPID != p.BackendPID
	if err := queue.CheckSessionOn(ctx, conn); err != nil {
		if !errors.Is(err, queue.ErrNoSession) {
			return p, err
		}
		p.NoSession = err
	}
	return p, nil
}

// closeQuietly closes conn without waiting long for the server.
func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// WakeRow is one dispatcher set's wake flag (a row of pepsi.wake).
type WakeRow struct {
	Set   string `json:"set"` // the set's name (queue.SetName): its stages joined by commas, "*" for all
	Armed bool   `json:"armed"`
}

// WakeState is the wake flag as producers and dispatchers see it.
type WakeState struct {
	Rows []WakeRow `json:"rows"`
	// Counter is pepsi.wake_armed, the number of armed sets producers
	// read; nil when it was never set (after a crash):
	// then producers take every dispatcher as armed.
	Counter *int64 `json:"counter"`
	Armed   bool   `json:"armed"` // pepsi.armed(): whether a producer notifies now
}

// WakeState reads pepsi.wake, pepsi.wake_armed and pepsi.armed().
func (db *DB) WakeState(ctx context.Context) (WakeState, error) {
	w := WakeState{Rows: []WakeRow{}}
	rows, err := db.pool.Query(ctx, "SELECT dispatcher, armed FROM pepsi.wake ORDER BY dispatcher")
	if err != nil {
		return w, err
	}
	var r WakeRow
	if _, err := pgx.ForEachRow(rows, []any{&r.Set, &r.Armed}, func() error {
		w.Rows = append(w.Rows, r)
		return nil
	}); err != nil {
		return w, err
	}
	err = db.pool.QueryRow(ctx, "SELECT pg_sequence_last_value('pepsi.wake_armed'), pepsi.armed()").Scan(&w.Counter, &w.Armed)
	return w, err
}

// ServerConnections is the server's connection limit and how many client
// sessions it has open, in every database.
type ServerConnections struct {
	queue.ConnLimit
	Open int // client backends open now
}

// ServerConnections reads the connection settings (as
// queue.Listener.ConnectionLimit) and counts the open client sessions.
func (db *DB) ServerConnections(ctx context.Context) (ServerConnections, error) {
	var s ServerConnections
	c, err := db.pool.Acquire(ctx)
	if err != nil {
		return s, err
	}
	defer c.Release()
	if s.ConnLimit, err = queue.ConnectionLimitOn(ctx, c.Conn()); err != nil {
		return s, err
	}
	err = c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&s.Open)
	return s, err
}

// Backlog is what waits in pepsi.ingress for a dispatcher to admit it.
type Backlog struct {
	Rows   int64      `json:"rows"`
	Oldest *time.Time `json:"oldest,omitempty"` // nil when there are none
	Now    time.Time  `json:"now"`              // the server's clock
}

// IngressBacklog counts the rows of pepsi.ingress and finds the oldest.
func (db *DB) IngressBacklog(ctx context.Context) (Backlog, error) {
	var b Backlog
	err := db.pool.QueryRow(ctx, "SELECT count(*), min(created_at), now() FROM pepsi.ingress").Scan(&b.Rows, &b.Oldest, &b.Now)
	return b, err
}

// AdvisoryLock is one advisory lock of this database, held or waited for.
type AdvisoryLock struct {
	Kind    string `json:"kind"`            // one of the queue.Lock… kinds (queue.LockKind)
	Stage   string `json:"stage,omitempty"` // for a stage or fence lock: the stage, when it is one asked about
	Key     string `json:"key"`             // the key: "N" (bigint form) or "N,M" (two-int form)
	Mode    string `json:"mode"`            // ExclusiveLock or ShareLock
	Granted bool   `json:"granted"`
	PID     int32  `json:"server_pid"`
	Name    string `json:"application_name"`
	// Since is when a waiting session began to wait (PostgreSQL 14 and
	// later); nil when held.
	Since *time.Time `json:"waiting_since,omitempty"`
}

// IsPepsi reports whether the lock is one of pepsi's.
func (l AdvisoryLock) IsPepsi() bool { return l.Kind != queue.LockOther }

// advisoryLocksSQL lists the advisory locks of this database with their
// sessions; a two-int lock's stage is found among $1 by hashtext.
const advisoryLocksSQL = `
SELECT l.objsubid, l.classid::bigint, l.objid::bigint, l.mode, l.granted, l.pid,
       coalesce(a.application_name, ''), (to_jsonb(l) ->> 'waitstart')::timestamptz,
       (SELECT s FROM unnest($1::text[]) s WHERE l.objsubid = 2 AND hashtext(s)::bigint & $2 = l.objid::bigint LIMIT 1)
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY l.granted DESC, l.pid, l.objsubid, l.classid, l.objid`

// AdvisoryLocks returns the advisory locks of this database, held first,
// each named by its kind; stages are the names a stage lock is looked up
// among.
func (db *DB) AdvisoryLocks(ctx context.Context, stages []string) ([]AdvisoryLock, error) {
	if stages == nil {
		stages = []string{}
	}
	rows, err := db.pool.Query(ctx, advisoryLocksSQL, stages, queue.ObjIDMask)
	if err != nil {
		return nil, err
	}
	out := []AdvisoryLock{}
	var l AdvisoryLock
	var subid int16
	var class, obj int64
	var stage *string
	_, err = pgx.ForEachRow(rows, []any{&subid, &class, &obj, &l.Mode, &l.Granted, &l.PID, &l.Name, &l.Since, &stage}, func() error {
		x := l
		l.Since = nil
		x.Kind, x.Key = queue.LockKind(subid, class, obj)
		if stage != nil && (x.Kind == queue.LockStage || x.Kind == queue.LockFence || x.Kind == queue.LockStandby) {
			x.Stage = *stage
		}
		out = append(out, x)
		return nil
	})
	return out, err
}
