package dispatch

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// analyzeGap is the least time between two ANALYZEs of one table by the
// janitor: PostgreSQL's default autovacuum_naptime, the most often its
// autovacuum analyzes a table.
const analyzeGap = time.Minute

// analyzeEvery is the least time between two analyze checks: the check
// reads the statistics of every table of the schema, which the vacuum
// check's interval would repeat needlessly often.
const analyzeEvery = 10 * time.Second

// analyzer is the janitor's analyze check, run by the vacuum service
// after its vacuum check. The planner's statistics of pepsi's tables
// (ANALYZE) are what keep the dashboard's and the command line's queries
// on their indexes; with the server's autovacuum off for a table, nothing
// else keeps them, and a partitioned table (pepsi.state, pepsi.state_done,
// pepsi.message) is never analyzed by autovacuum at all. So it analyzes a
// table the server's autovacuum leaves alone once its rows changed since
// its last ANALYZE pass autovacuum's own threshold (see docs/design.md,
// "Planner statistics"), and a partitioned table once its partitions' rows
// did.
type analyzer struct {
	store vacuumStore
	log   *slog.Logger
	gap   time.Duration // analyzeGap
	every time.Duration // analyzeEvery
	next  time.Time     // the next check, not before
	ddl   *sync.Mutex   // held for each ANALYZE (see retention.ddl); nil: none

	// seen is, for each partitioned table, its partitions' changes
	// (Staleness.Changed) when its last ANALYZE was first seen.
	seen map[string]partitioned
	last map[string]time.Time // when this analyzer last analyzed a table
}

// partitioned is a partitioned table's changes at its last ANALYZE.
type partitioned struct {
	changed  int64
	analyzed time.Time
}

func newAnalyzer(store vacuumStore, log *slog.Logger) *analyzer {
	// The first check comes a.every after the start, not in the burst of
	// the dispatcher's own start (its statements planned, its ranges
	// created), whose plans an ANALYZE would have replanned at once.
	return &analyzer{store: store, log: log, gap: analyzeGap, every: analyzeEvery, next: time.Now().Add(analyzeEvery),
		seen: map[string]partitioned{}, last: map[string]time.Time{}}
}

// check analyzes the tables whose statistics are stale, one at a time,
// at most every a.every, reading the statistics again after each ANALYZE
// (one of a partitioned table analyzes its partitions too).
func (a *analyzer) check(ctx context.Context) error {
	if time.Now().Before(a.next) {
		return nil
	}
	a.next = time.Now().Add(a.every)
	done := map[string]bool{}
	for {
		tables, err := a.store.Stalenesses(ctx)
		if err != nil {
			return err
		}
		var next *queue.Staleness
		for i := range tables {
			t := &tables[i]
			if !done[t.Table] && a.stale(t) && next == nil {
				next = t
			}
		}
		if next == nil {
			return nil
		}
		start := time.Now()
		if err := a.analyze(ctx, next.Table); err != nil {
			return err
		}
		done[next.Table] = true
		a.last[next.Table] = start
		a.log.Debug("analyzed "+next.Table, "changed", next.Changed, "threshold", math.Round(next.Threshold), "took", time.Since(start).Round(time.Millisecond))
	}
}

// analyze runs ANALYZE on table, holding a.ddl.
func (a *analyzer) analyze(ctx context.Context, table string) error {
	if a.ddl != nil {
		a.ddl.Lock()
		defer a.ddl.Unlock()
	}
	return a.store.Analyze(ctx, table)
}

// stale says whether t is to be analyzed now, noting a partitioned
// table's changes at its last ANALYZE.
func (a *analyzer) stale(t *queue.Staleness) bool {
	return a.due(t) && time.Since(a.last[t.Table]) >= a.gap
}

// due says whether t's rows changed enough since its last ANALYZE.
func (a *analyzer) due(t *queue.Staleness) bool {
	if !t.Partitioned {
		return !t.Autovacuum && float64(t.Changed) > t.Threshold
	}
	seen, ok := a.seen[t.Table]
	switch {
	case !ok && t.Analyzed && math.Abs(t.Live-t.Rows) <= t.Threshold:
		// Not seen analyzed before, and its rows are about as many as at
		// its last ANALYZE: count its changes from now on.
		a.seen[t.Table] = partitioned{t.Changed, t.LastAnalyzed}
		return false
	case !ok:
		return t.Live > 0 || t.Analyzed // never analyzed, or its rows have changed
	case !seen.analyzed.Equal(t.LastAnalyzed):
		// Analyzed since (by this analyzer, with a table it is a
		// partition of, or by someone else): count from then.
		a.seen[t.Table] = partitioned{t.Changed, t.LastAnalyzed}
		return false
	}
	// Its partitions' changes only grow, but for a partition dropped or
	// the server's statistics reset: either way its rows changed.
	return math.Abs(float64(t.Changed-seen.changed)) > t.Threshold
}
