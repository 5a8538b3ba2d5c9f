package dashboard

import (
	"slices"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// The standbys this server has seen, so that the overview can say when a
// dispatcher that had one runs without it (after a failover, the standby
// that took over has none behind it). The database keeps no trace of a
// standby that is gone (it is a session waiting for a lock), so the memory
// is this server's: every read of the dispatchers' sessions (the sampler's
// and the pages') adds to it, a restart starts it empty, and a standby not
// seen for standbyMemory is forgotten.

// standbyMemory is how long a standby that went away is remembered.
const standbyMemory = 24 * time.Hour

// seenStandby is a standby as last seen.
type seenStandby struct {
	admin.DispatcherSession
	At time.Time
}

// standbys remembers the standbys seen, by the lock they waited for: ""
// for the database-wide one (standbys of a dispatcher without a stage
// set), else the stage whose lock (a stage set's standby).
type standbys struct {
	mu   sync.Mutex
	seen map[string]seenStandby
}

// note records the standbys of d, seen at now.
func (s *standbys) note(d admin.Dispatchers, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]seenStandby{}
	}
	for _, w := range d.Standbys {
		s.seen[w.WaitsFor] = seenStandby{w, now}
	}
	for k, w := range s.seen {
		if now.Sub(w.At) > standbyMemory {
			delete(s.seen, k)
		}
	}
}

// lostStandby is a running dispatcher without a standby, and the standby
// seen for it last.
type lostStandby struct {
	Dispatcher admin.DispatcherSession `json:"dispatcher"`
	Standby    admin.DispatcherSession `json:"last_standby"`
	LastSeen   time.Time               `json:"last_seen"`
}

// lost returns the running dispatchers of d that no standby waits for now
// while one was seen waiting for their lock before (within
// standbyMemory): for one without a stage set, a standby of the
// database-wide lock; for one with a set, of one of its stages.
func (s *standbys) lost(d admin.Dispatchers) []lostStandby {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []lostStandby
	for _, r := range d.Running {
		keys := r.Stages
		if r.All {
			keys = []string{""}
		}
		if slices.ContainsFunc(d.Standbys, func(w admin.DispatcherSession) bool { return slices.Contains(keys, w.WaitsFor) }) {
			continue
		}
		var last *seenStandby
		for _, k := range keys {
			if w, ok := s.seen[k]; ok && (last == nil || w.At.After(last.At)) {
				last = &w
			}
		}
		if last != nil {
			out = append(out, lostStandby{Dispatcher: r, Standby: last.DispatcherSession, LastSeen: last.At})
		}
	}
	return out
}
