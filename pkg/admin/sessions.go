package admin

import (
	"cmp"
	"context"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// DispatcherSession is a dispatcher's lock session (see pkg/queue's
// owner.go): one that owns stages, or a standby waiting for a lock.
type DispatcherSession struct {
	ServerPID int32  `json:"server_pid"` // the session's server process
	Name      string `json:"name"`       // its application_name, "" when unknown
	PID       int    `json:"pid"`        // the dispatcher's process id, from Name (0 when Name does not say)
	Host      string `json:"host"`       // the dispatcher's host, from Name
	// Since is when the session connected (pg_stat_activity.backend_start):
	// for a dispatcher, when it took its locks, unless it was a standby
	// that waited for them first; nil when the server does not say.
	Since *time.Time `json:"since,omitempty"`
	// WaitingSince is when a standby began to wait (pg_locks.waitstart,
	// PostgreSQL 14 and later); nil for a running dispatcher.
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
	// All: a dispatcher without a stage set, which owns every stage (it
	// holds the database-wide lock exclusive).
	All bool `json:"all"`
	// Stages: of the stages asked about, those a running dispatcher owns,
	// in the order asked (All: every one).
	Stages []string `json:"stages"`
	// WaitsFor: a standby's stage, the one whose lock it waits for; ""
	// when it waits for the database-wide lock (or a stage not asked about).
	WaitsFor string `json:"waits_for,omitempty"`
}

// Dispatchers is who owns the stages and who waits to.
type Dispatchers struct {
	// Running are the dispatchers holding their locks: the one that owns
	// every stage first, then those with stage sets in the order of the
	// first stage each owns. Empty when none runs.
	Running []DispatcherSession `json:"running"`
	// Holder is the dispatcher that owns every stage (All), nil when none
	// does (none runs, or dispatchers with stage sets do).
	Holder *DispatcherSession `json:"holder"`
	// Owners gives each stage asked about that has an owner its owner, one
	// of Running.
	Owners   map[string]*DispatcherSession `json:"-"`
	Standbys []DispatcherSession           `json:"standbys"` // waiting, the longest first
}

// dispatcherNameRE reads the application_name queue.Dial gives the listener
// session.
var dispatcherNameRE = regexp.MustCompile(`^pepsi dispatch pid (\d+) on (.+)$`)

// dispatcherSessionsSQL lists the sessions that hold or wait for the
// dispatchers' locks (see pkg/queue's owner.go): the database-wide lock
// ($1) and the stage locks ($2, hashtext(stage)), with the stage of $3 a
// stage lock is for. The shared transaction locks that Redrive and Purge
// take are left out (they are shared and not a dispatcher's; a stage-set
// dispatcher's shared hold of the database-wide lock is on its named lock
// session). A standby polls for the lock it waits for and holds a standby
// lock ($5, or class $6 with hashtext(stage)) meanwhile: those rows are
// reported as waits. waitstart is read through to_jsonb so that the
// statement also runs on PostgreSQL 13, which does not have the column.
const dispatcherSessionsSQL = `
SELECT l.pid, l.granted AND NOT m.standby, l.mode = 'ExclusiveLock', l.objsubid = 1, s.stage,
       coalesce(a.application_name, ''), a.backend_start,
       CASE WHEN m.standby THEN a.backend_start ELSE (to_jsonb(l) ->> 'waitstart')::timestamptz END
  FROM pg_locks l
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  CROSS JOIN LATERAL (SELECT (l.objsubid = 1 AND ((l.classid::bigint << 32) | l.objid::bigint) = $5)
                          OR (l.objsubid = 2 AND l.classid::bigint = $6) AS standby) m
  LEFT JOIN (SELECT DISTINCT unnest($3::text[])) s(stage)
         ON l.objsubid = 2 AND l.objid::bigint = hashtext(s.stage)::bigint & $4
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.objsubid = 1 AND ((l.classid::bigint << 32) | l.objid::bigint) IN ($1, $5))
     OR (l.objsubid = 2 AND l.classid::bigint IN ($2, $6)))
   AND (l.mode = 'ExclusiveLock' OR a.application_name LIKE 'pepsi dispatch pid %')
 ORDER BY l.granted AND NOT m.standby DESC, 8 NULLS LAST, a.backend_start, l.pid`

// DispatcherSessions returns the dispatchers that own stages, which of
// stages each owns, and the standbys waiting for a lock (dispatchers
// started with --standby).
func (db *DB) DispatcherSessions(ctx context.Context, stages []string) (Dispatchers, error) {
	if stages == nil {
		stages = []string{}
	}
	rows, err := db.pool.Query(ctx, dispatcherSessionsSQL, int64(queue.DispatcherLock), int64(queue.StageLockClass), stages, queue.ObjIDMask,
		int64(queue.StandbyLock), int64(queue.StandbyLockClass))
	if err != nil {
		return Dispatchers{}, err
	}
	running := map[int32]*DispatcherSession{}
	waiting := map[int32]*DispatcherSession{}
	var order []int32 // the standbys, as the statement sorts them
	stageOwner := map[string]int32{}
	var s DispatcherSession
	var granted, exclusive, global bool
	var stage *string
	_, err = pgx.ForEachRow(rows, []any{&s.ServerPID, &granted, &exclusive, &global, &stage, &s.Name, &s.Since, &s.WaitingSince}, func() error {
		x := s
		s.Since, s.WaitingSince = nil, nil // scanned afresh, not into x's
		if m := dispatcherNameRE.FindStringSubmatch(x.Name); m != nil {
			x.PID, _ = strconv.Atoi(m[1])
			x.Host = m[2]
		}
		if !granted {
			if waiting[x.ServerPID] == nil {
				if stage != nil {
					x.WaitsFor = *stage
				}
				waiting[x.ServerPID] = &x
				order = append(order, x.ServerPID)
			}
			return nil
		}
		d := running[x.ServerPID]
		if d == nil {
			x.WaitingSince = nil
			d = &x
			running[x.ServerPID] = d
		}
		if global && exclusive {
			d.All = true
		}
		if stage != nil && exclusive {
			stageOwner[*stage] = x.ServerPID
		}
		return nil
	})
	if err != nil {
		return Dispatchers{}, err
	}
	var all *DispatcherSession
	for _, d := range running {
		if d.All && (all == nil || d.ServerPID < all.ServerPID) {
			all = d
		}
	}
	first := map[int32]int{} // the position of each dispatcher's first stage
	seen := map[string]bool{}
	for i, st := range stages {
		if seen[st] {
			continue
		}
		seen[st] = true
		var d *DispatcherSession
		if pid, ok := stageOwner[st]; ok {
			d = running[pid]
		} else if all != nil {
			d = all
		}
		if d == nil {
			continue
		}
		d.Stages = append(d.Stages, st)
		if _, ok := first[d.ServerPID]; !ok {
			first[d.ServerPID] = i
		}
	}
	out := Dispatchers{Running: make([]DispatcherSession, 0, len(running)), Owners: map[string]*DispatcherSession{}, Standbys: []DispatcherSession{}}
	for _, d := range running {
		if d.Stages == nil {
			d.Stages = []string{}
		}
		out.Running = append(out.Running, *d)
	}
	pos := func(d DispatcherSession) int {
		if i, ok := first[d.ServerPID]; ok {
			return i
		}
		return len(stages)
	}
	slices.SortFunc(out.Running, func(a, b DispatcherSession) int {
		if a.All != b.All {
			if a.All {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(pos(a), pos(b)), cmp.Compare(a.ServerPID, b.ServerPID))
	})
	for i := range out.Running {
		d := &out.Running[i]
		if all != nil && d.ServerPID == all.ServerPID {
			out.Holder = d
		}
		for _, st := range d.Stages {
			out.Owners[st] = d
		}
	}
	for _, pid := range order {
		if running[pid] == nil { // a session both holding and waiting is a dispatcher
			w := *waiting[pid]
			w.Stages = []string{}
			out.Standbys = append(out.Standbys, w)
		}
	}
	return out, nil
}

// ownersSQL finds each stage's owner: the holder of the stage's exclusive
// lock, or of the database-wide lock exclusive (a dispatcher without a
// stage set: it owns the stages of its configuration, and none other can
// run).
const ownersSQL = `
WITH locks AS (
    SELECT l.pid, l.classid::bigint AS classid, l.objid::bigint AS objid, l.objsubid, coalesce(a.application_name, '') AS app
      FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT s, coalesce(st.pid, g.pid), coalesce(st.app, g.app)
  FROM unnest($1::text[]) s
  LEFT JOIN LATERAL (SELECT pid, app FROM locks
                      WHERE objsubid = 2 AND classid = $2 AND objid = hashtext(s)::bigint & $3 LIMIT 1) st ON true
  LEFT JOIN LATERAL (SELECT pid, app FROM locks
                      WHERE objsubid = 1 AND ((classid << 32) | objid) = $4 LIMIT 1) g ON true
 WHERE coalesce(st.pid, g.pid) IS NOT NULL`

// Owners returns the owner of each of stages that has one.
func (db *DB) Owners(ctx context.Context, stages []string) (map[string]queue.LockHolder, error) {
	rows, err := db.pool.Query(ctx, ownersSQL, stages, int64(queue.StageLockClass), queue.ObjIDMask, int64(queue.DispatcherLock))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]queue.LockHolder)
	for rows.Next() {
		var stage string
		var h queue.LockHolder
		if err := rows.Scan(&stage, &h.PID, &h.Name); err != nil {
			return nil, err
		}
		out[stage] = h
	}
	return out, rows.Err()
}
