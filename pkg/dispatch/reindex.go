package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The reindex rule: an index of pepsi.state_live or pepsi.message is
// rebuilt once it is more than reindexFactor times the size its entries
// take freshly built and that is reindexMin bytes or more of waste; an
// index at most once per reindexEvery, and never more than one
// reindexShare of the time (a rebuild that took a minute waits ten).
const (
	reindexFactor = 2
	reindexMin    = 1 << 20
	reindexEvery  = 5 * time.Minute
	reindexShare  = 0.1
)

// reindex keeps the B-tree indexes of pepsi.state_live and pepsi.message
// from keeping the size of their busiest moment until ctx is done. Every
// pass rewrites a queue row's index entries and the retention sweep
// deletes messages; VACUUM empties their pages, but an emptied B-tree
// page is only reused, never given back, so an index stays as large as
// the most entries, live and dead, it ever held between two VACUUMs. Every
// VACUUM_INTERVAL, on the janitor, it drops what an interrupted REINDEX
// left, then rebuilds the most wasteful index the rule picks (one at a
// time: a REINDEX INDEX CONCURRENTLY, which lets writes go on) on a pool
// connection of its own, apart from the vacuum sweep, which goes on with
// the other table meanwhile.
func (d *Dispatcher) reindex(ctx context.Context, db *queue.DB, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	r := reindexer{d: d, db: db, next: map[string]time.Time{}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if d.janitor.Load() { // else another dispatcher reindexes
			r.once(ctx)
		}
	}
}

// reindexer is the reindex goroutine's state.
type reindexer struct {
	d    *Dispatcher
	db   *queue.DB
	next map[string]time.Time // when each index may be rebuilt again
	// A failure is logged once: the check's (leftovers, sizes) until a
	// check succeeds, a rebuild's until a rebuild succeeds.
	checkFailing, rebuildFailing bool
}

// once drops leftovers, then rebuilds the index pickReindex picks.
func (r *reindexer) once(ctx context.Context) {
	log := r.d.log
	dropped, err := r.db.DropReindexLeftovers(ctx)
	for _, name := range dropped {
		log.Info("dropped " + name + ", the invalid copy an interrupted REINDEX left")
	}
	var sizes []queue.IndexSize
	if err == nil {
		sizes, err = r.db.IndexSizes(ctx, reindexMin)
	}
	if err != nil && ctx.Err() == nil && !r.checkFailing {
		log.Warn("reindex check failed; retrying at the next interval", "err", err)
	}
	if r.checkFailing = err != nil; err != nil {
		return
	}
	start := time.Now()
	ix, ok := pickReindex(sizes, r.next, start)
	if !ok {
		return
	}
	size, err := r.db.Reindex(ctx, ix.Name)
	took := time.Since(start)
	r.next[ix.Name] = start.Add(max(reindexEvery, time.Duration(float64(took)/reindexShare)))
	switch {
	case err == nil:
		r.rebuildFailing = false
		log.Info("reindexed "+ix.Name, "before", ix.Size, "after", size, "entries", int64(ix.Entries), "need", ix.Need,
			"took", took.Round(time.Millisecond))
	case ctx.Err() == nil && !r.rebuildFailing:
		r.rebuildFailing = true
		log.Warn("reindex failed; the invalid copy it may leave is dropped at the next interval, the index tried again after "+
			r.next[ix.Name].Sub(start).String(), "index", ix.Name, "err", err)
	}
}

// pickReindex returns the index of sizes that the rule says to rebuild
// now, the one with the most waste when several do, and whether there is
// one. An index whose table has an index build under way (another
// session's, or an earlier janitor's REINDEX still running) waits.
func pickReindex(sizes []queue.IndexSize, next map[string]time.Time, now time.Time) (queue.IndexSize, bool) {
	var best queue.IndexSize
	found := false
	for _, s := range sizes {
		waste := s.Size - s.Need
		if s.Busy || s.Size <= reindexFactor*s.Need || waste < reindexMin || now.Before(next[s.Name]) {
			continue
		}
		if !found || waste > best.Size-best.Need {
			best, found = s, true
		}
	}
	return best, found
}
