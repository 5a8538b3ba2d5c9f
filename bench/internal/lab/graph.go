package lab

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The graph step's sizes and targets (issue 50).
const (
	graphChildren    = 100_000 // children of the one parent of the fan-out
	graphRuns        = 3       // fan-out and its baseline, alternated; the medians count
	joinParents      = 1_000   // parents fanning out at once for the join latency
	joinChildren     = 20      // children of each
	targetFanOut     = 0.8     // children/s ÷ independent messages/s, at least
	targetJoinP50    = 20 * time.Millisecond
	targetJoinP99    = 100 * time.Millisecond
	graphSampleEvery = 20 * time.Millisecond
)

// graph measures fan-out and fan-in:
//   - one parent's graphChildren children through one no-op status-line
//     stage, from the commit that spawned them to the last one done,
//     against as many independent messages through the same stage, from
//     the commit that enqueued them (alternated, graphRuns each);
//   - the join latency while joinParents parents fan out at once into
//     joinChildren children each, whose stage does its work and its move
//     in its own transaction: from the last child's commit (its updated_at:
//     its settle comes after, so the figure is an upper bound) to the
//     parent's id read on a join stage worker's stdin; and, sampled every
//     graphSampleEvery meanwhile, the child stage's sessions waiting on a
//     lock.
func (b *bench) graph(ctx context.Context) error {
	if err := b.reset(ctx); err != nil {
		return err
	}
	p := pipeline{name: "graph", mode: "statusline", stages: b.stages[:2], parallelism: []int{b.o.Parallelism, 1},
		queueLimit: b.o.QueueLimit, apart: true}
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return err
	}
	defer d.stop()                                                           //nolint:errcheck
	if _, err := b.enqueueBatch(ctx, p.workers()*p.queueLimit); err != nil { // starts the workers
		return err
	}
	if err := b.waitIdle(ctx, d, time.Minute); err != nil {
		return err
	}
	var fan, alone []float64
	for i := range graphRuns {
		b.progress("graph: fan-out of %d children against as many messages, run %d of %d", graphChildren, i+1, graphRuns)
		r, err := b.independent(ctx, d, graphChildren)
		if err != nil {
			return err
		}
		alone = append(alone, r)
		if r, err = b.fanOut(ctx, d, graphChildren); err != nil {
			return err
		}
		fan = append(fan, r)
	}
	slices.Sort(fan)
	slices.Sort(alone)
	f, a := fan[len(fan)/2], alone[len(alone)/2]
	b.report.add(Figure{Key: "graph.fanout", Name: fmt.Sprintf("fan-out of one parent into %d children through one no-op stage (%d workers), median of %d",
		graphChildren, b.o.Parallelism, graphRuns), Value: f, Unit: "msg/s", Ceiling: a, Of: "as many independent messages through the same stage",
		Target: "≥ 0.8×", Met: atLeast(f/a, targetFanOut), Load: loadAvg()})
	b.report.note("graph fan-out runs (children/s | independent msg/s): %.0f | %.0f", fan, alone)
	if _, err := d.stop(); err != nil {
		return err
	}
	return b.joinLatency(ctx)
}

// independent enqueues n messages at the first stage and returns how many
// a second went through, from their commit to the last one done.
func (b *bench) independent(ctx context.Context, d *dispatchProc, n int) (float64, error) {
	if _, err := b.sql.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, err
	}
	first, err := b.enqueueBatch(ctx, n)
	if err != nil {
		return 0, err
	}
	var at time.Time
	if err := b.sql.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
		return 0, err
	}
	if err := b.waitIdle(ctx, d, 10*time.Minute); err != nil {
		return 0, err
	}
	var last time.Time
	if err := b.sql.QueryRow(ctx, "SELECT max(updated_at) FROM pepsi.state WHERE id >= $1", first).Scan(&last); err != nil {
		return 0, err
	}
	if err := b.checkDone(ctx, first); err != nil {
		return 0, err
	}
	return float64(n) / last.Sub(at).Seconds(), b.reset(ctx)
}

// fanOut makes one parent with n children at the first stage, waiting at
// the second, as a stage would in its transaction, and returns how many
// children a second went through, from that commit to the last one done.
func (b *bench) fanOut(ctx context.Context, d *dispatchProc, n int) (float64, error) {
	if _, err := b.sql.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, err
	}
	parents, err := b.parents(ctx, 1, n)
	if err != nil {
		return 0, err
	}
	var at time.Time
	if err := b.sql.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
		return 0, err
	}
	if err := d.waitFor(ctx, "the parent not done", 10*time.Minute, b.parentsDone(parents)); err != nil {
		return 0, err
	}
	var last time.Time
	var done int
	if err := b.sql.QueryRow(ctx, "SELECT max(updated_at), count(*) FILTER (WHERE status = 'done') FROM pepsi.state WHERE parent = $1",
		parents[0]).Scan(&last, &done); err != nil {
		return 0, err
	}
	if done != n {
		return 0, fmt.Errorf("graph: %d of %d children done", done, n)
	}
	return float64(n) / last.Sub(at).Seconds(), b.reset(ctx)
}

// parents makes k running parents at the first stage, each with n
// children there and waiting at the second stage, in one transaction (as
// the parents' stage would, each in its own), and returns their ids.
func (b *bench) parents(ctx context.Context, k, n int) ([]int64, error) {
	tx, err := b.sql.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := tx.Query(ctx, `
WITH m AS (INSERT INTO pepsi.message (payload) SELECT 'parent' FROM generate_series(1, $1) RETURNING id)
INSERT INTO pepsi.state (id, stage, status) SELECT id, 'graph-split', 'running' FROM m RETURNING id`, k)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `
SELECT pepsi.spawn_many(p, $2, array_fill('child'::bytea, ARRAY[$3::int])), pepsi.join(p, $4)
  FROM unnest($1::bigint[]) AS p`, ids, b.stages[0], n, b.stages[1]); err != nil {
		return nil, err
	}
	return ids, tx.Commit(ctx)
}

// parentsDone is a condition: every parent of ids is done.
func (b *bench) parentsDone(ids []int64) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var open bool
		err := b.sql.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pepsi.state WHERE id = ANY($1) AND status <> 'done')", ids).Scan(&open)
		return !open, err
	}
}

// joinLatency is the join latency figure (see graph).
func (b *bench) joinLatency(ctx context.Context) error {
	p := pipeline{name: "graph join", mode: "tx", stages: b.stages[:2], parallelism: []int{b.o.Parallelism, 1},
		queueLimit: b.o.QueueLimit, apart: true, trace: b.path("graph.trace")}
	b.progress("graph: join latency, %d parents × %d children at once", joinParents, joinChildren)
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return err
	}
	defer d.stop() //nolint:errcheck
	if _, err := b.enqueueBatch(ctx, p.workers()*p.queueLimit); err != nil {
		return err
	}
	if err := b.waitIdle(ctx, d, time.Minute); err != nil {
		return err
	}
	if err := b.reset(ctx); err != nil {
		return err
	}
	if _, err := b.sql.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	var samples, waits int
	events := map[string]int{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sctx.Err() == nil {
			rows, err := b.sql.Query(sctx, `SELECT coalesce(wait_event, '') FROM pg_stat_activity
			 WHERE application_name LIKE $1 AND wait_event_type = 'Lock'`, "pepsi bench stage "+b.stages[0]+"%")
			if err == nil {
				for rows.Next() {
					var ev string
					if rows.Scan(&ev) == nil {
						waits++
						events[ev]++
					}
				}
				rows.Close()
				samples++
			}
			time.Sleep(graphSampleEvery)
		}
	}()
	ids, err := b.parents(ctx, joinParents, joinChildren)
	if err == nil {
		err = d.waitFor(ctx, "parents not done", 10*time.Minute, b.parentsDone(ids))
	}
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	if _, err := d.stop(); err != nil {
		return err
	}
	read, err := readTrace(p.trace, b.stages[1])
	if err != nil {
		return err
	}
	rows, err := b.sql.Query(ctx, "SELECT parent, max(updated_at) FROM pepsi.state WHERE parent = ANY($1) GROUP BY parent", ids)
	if err != nil {
		return err
	}
	var lat []time.Duration
	for rows.Next() {
		var parent int64
		var last time.Time
		if err := rows.Scan(&parent, &last); err != nil {
			return err
		}
		r, ok := read[parent]
		if !ok {
			return fmt.Errorf("graph: parent %d was never read by a %s worker", parent, b.stages[1])
		}
		lat = append(lat, r.Sub(last))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(lat) != joinParents {
		return fmt.Errorf("graph: %d of %d parents had children", len(lat), joinParents)
	}
	q := percentiles(lat, 0.5, 0.99)
	load := loadAvg()
	name := fmt.Sprintf("join latency, %d parents × %d children at once (last child's commit → parent read at the join stage)", joinParents, joinChildren)
	b.report.add(Figure{Key: "graph.join.p50", Name: name + ": p50", Value: ms(q[0]), Unit: "ms", Target: "≤ 20 ms",
		Met: atMost(ms(q[0]), ms(targetJoinP50)), Load: load})
	b.report.add(Figure{Key: "graph.join.p99", Name: name + ": p99", Value: ms(q[1]), Unit: "ms", Target: "≤ 100 ms",
		Met: atMost(ms(q[1]), ms(targetJoinP99)), Load: load})
	b.report.note("graph join run: the child stage's sessions waiting on a lock, sampled every %v: %d in %d samples %v",
		graphSampleEvery, waits, samples, events)
	return b.reset(ctx)
}
