package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The sustained step's settings and targets (issue 13 §3).
const (
	sustainedRetention = "60"   // RETENTION of its dispatcher, seconds
	sustainedBacklog   = 20_000 // pending messages at the first stage the feed keeps at least
	sustainedBatch     = 10_000 // messages a feed tops up with
	sustainedClaim     = 48     // rows the timed claim takes at the first stage
	targetSustained    = 0.9    // last minute's throughput ÷ the second minute's, at least
)

// minute is what the sustained step measured in one minute.
type minute struct {
	done  int64            // messages done during it (pepsi.dispatch_stats)
	sizes map[string]int64 // bytes of each of pepsi's tables and indexes at its end
	kept  int64            // messages in pepsi.state at its end (unfinished, and finished within RETENTION)
	peak  int64            // the most pepsi's tables and indexes took at a sample during it
}

// sizeEvery is how often the sustained step samples pepsi's sizes for
// each minute's peak. Retention drops a range of done rows every
// RETENTION/4 (15 s), so the size at a given moment is a saw whose teeth
// are a range and its messages: the size at the end of a minute depends
// on where in a tooth the minute ends; its peak over the minute does not.
const sizeEvery = time.Second

// sustained feeds a 3-stage status-line pipeline at its peak (the first
// stage never runs dry) for SustainedTime with RETENTION = 1 minute, and
// reports each minute's throughput, pepsi's table and index sizes at the
// end of each minute, and the claim's time at the end against the start.
func (b *bench) sustained(ctx context.Context) error {
	mins := int(b.o.SustainedTime / time.Minute)
	p := b.newPipeline("sustained", "statusline", b.o.Stages*b.o.Parallelism)
	p.retention, p.statsInterval = sustainedRetention, "5"
	if err := b.reset(ctx); err != nil {
		return err
	}
	if _, err := b.sql.Exec(ctx, "UPDATE pepsi.dispatch_stats SET done = 0"); err != nil {
		return err
	}
	b.progress("sustained: %d minutes at the peak, RETENTION = %s s", mins, sustainedRetention)
	// The claim is timed with no dispatcher running, at the start and at
	// the end: its rolled-back UPDATE would fight the dispatcher's claim
	// for the same rows (and deadlock with it). It claims at the first
	// stage, the one the feed keeps a backlog at: the same work at both
	// ends (at the start the other stages have nothing to claim).
	caps := []queue.StageCap{{Stage: p.stages[0], Cap: sustainedClaim}}
	if err := b.feedTo(ctx, sustainedBacklog); err != nil {
		return err
	}
	claimStart, err := b.claimMedian(ctx, caps, 20)
	if err != nil {
		return err
	}
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return err
	}
	defer d.stop() //nolint:errcheck // a second stop is harmless
	var got []minute
	last, err := b.doneCount(ctx)
	if err != nil {
		return err
	}
	next := time.Now().Add(time.Minute)
	var peak int64
	nextSize := time.Now()
	for len(got) < mins {
		if err := d.alive(); err != nil {
			return err
		}
		if err := b.feedTo(ctx, sustainedBacklog); err != nil {
			return err
		}
		if now := time.Now(); !now.Before(nextSize) {
			sizes, err := b.sizes(ctx)
			if err != nil {
				return err
			}
			peak, nextSize = max(peak, total(sizes)), now.Add(sizeEvery)
		}
		if time.Now().Before(next) {
			if err := d.run(ctx, 100*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		next = next.Add(time.Minute)
		done, err := b.doneCount(ctx)
		if err != nil {
			return err
		}
		sizes, err := b.sizes(ctx)
		if err != nil {
			return err
		}
		kept, err := b.keptCount(ctx)
		if err != nil {
			return err
		}
		got = append(got, minute{done: done - last, sizes: sizes, kept: kept, peak: max(peak, total(sizes))})
		last, peak = done, 0
		b.progress("sustained: minute %d: %s msg/s, pepsi's tables %s (at most %s)", len(got), num(float64(got[len(got)-1].done)/60),
			mb(total(sizes)), mb(got[len(got)-1].peak))
	}
	if _, err := d.stop(); err != nil {
		return err
	}
	claimEnd, err := b.claimMedian(ctx, caps, 20)
	if err != nil {
		return err
	}
	rep := b.report
	for i, m := range got {
		f := Figure{Key: fmt.Sprintf("sustained.minute%d", i+1), Name: fmt.Sprintf("sustained pipeline (%d stages, %d workers, RETENTION = 1 min), minute %d: messages",
			len(p.stages), p.workers(), i+1), Value: float64(m.done) / 60, Unit: "msg/s"}
		if i > 1 {
			f.Ceiling, f.Of = float64(got[1].done)/60, "minute 2"
		}
		if i == len(got)-1 && i > 1 {
			f.Target, f.Met = "≥ 0.9×", atLeast(float64(m.done)/float64(got[1].done), targetSustained)
		}
		rep.add(f)
	}
	for i, m := range got {
		rep.note("sustained, minute %d: at most %s; at its end %s; %s messages kept, %s bytes each", i+1, mb(m.peak), sizeLine(m.sizes),
			num(float64(m.kept)), num(perKept(m)))
	}
	if len(got) >= 3 {
		last, third := got[len(got)-1], got[2]
		rep.add(Figure{Key: "sustained.size", Name: "sustained pipeline: pepsi's tables and indexes at the end", Value: float64(total(last.sizes)) / 1e6, Unit: "MB",
			Ceiling: float64(total(third.sizes)) / 1e6, Of: "at the end of minute 3"})
		rep.add(Figure{Key: "sustained.peak", Name: fmt.Sprintf("sustained pipeline: pepsi's tables and indexes, the most in the last minute (sampled every %v)", sizeEvery),
			Value: float64(last.peak) / 1e6, Unit: "MB", Ceiling: float64(third.peak) / 1e6, Of: "the most in minute 3",
			Target: "≤ 1×", Met: atMost(float64(last.peak)/float64(third.peak), 1)})
		// What a message kept costs, whatever the throughput decides
		// RETENTION keeps: flat while millions pass if finished messages
		// leave nothing behind.
		rep.add(Figure{Key: "sustained.perkept", Name: "sustained pipeline: pepsi's tables and indexes per message kept, at the end",
			Value: perKept(last), Unit: "bytes", Ceiling: perKept(third), Of: "at the end of minute 3"})
	}
	rep.add(Figure{Key: "sustained.claim", Name: fmt.Sprintf("sustained pipeline: claim of %d at the first stage at the end, median of 20, no dispatcher running", sustainedClaim), Value: ms(claimEnd), Unit: "ms",
		Ceiling: ms(claimStart), Of: "the same claim at the start"})
	return b.reset(ctx)
}

// feedTo enqueues at the first stage while fewer than n are pending there.
func (b *bench) feedTo(ctx context.Context, n int) error {
	var pending int
	if err := b.sql.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM pepsi.state WHERE status = 'pending' AND stage = $1 LIMIT $2) p",
		b.stages[0], n).Scan(&pending); err != nil {
		return err
	}
	if pending >= n {
		return nil
	}
	_, err := b.enqueueBatch(ctx, sustainedBatch)
	return err
}

// claimMedian is the median of n claims of caps, each rolled back.
func (b *bench) claimMedian(ctx context.Context, caps []queue.StageCap, n int) (time.Duration, error) {
	var ds []time.Duration
	for range n {
		_, took, err := b.timeClaim(ctx, caps)
		if err != nil {
			return 0, err
		}
		ds = append(ds, took)
	}
	return percentiles(ds, 0.5)[0], nil
}

// keptCount is how many messages pepsi.state holds, finished or not.
func (b *bench) keptCount(ctx context.Context) (int64, error) {
	var n int64
	err := b.sql.QueryRow(ctx, "SELECT count(*) FROM pepsi.state").Scan(&n)
	return n, err
}

// perKept is the bytes of pepsi's tables and indexes per message kept at
// the end of m.
func perKept(m minute) float64 {
	if m.kept == 0 {
		return 0
	}
	return float64(total(m.sizes)) / float64(m.kept)
}

// doneCount is pepsi.dispatch_stats' done count (every dispatcher's).
func (b *bench) doneCount(ctx context.Context) (int64, error) {
	var n int64
	err := b.sql.QueryRow(ctx, "SELECT coalesce(sum(done), 0)::bigint FROM pepsi.dispatch_stats").Scan(&n)
	return n, err
}

// sizes returns the size of each of pepsi's tables and indexes, bytes. A
// range of done rows that retention drops while this reads has no size
// (pg_relation_size is NULL for it) and is left out.
func (b *bench) sizes(ctx context.Context) (map[string]int64, error) {
	rows, err := b.sql.Query(ctx, `SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pepsi' AND c.relkind IN ('r', 'i', 't')`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n *int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		if n != nil {
			out[name] = *n
		}
	}
	return out, rows.Err()
}

// total adds up sizes.
func total(sizes map[string]int64) int64 {
	var t int64
	for _, n := range sizes {
		t += n
	}
	return t
}

// sizeLine says pepsi's total and its largest tables and indexes, the
// ranges of done rows (pepsi.state_done's partitions, with their indexes)
// together, and so the ranges of messages (pepsi.message's).
func sizeLine(sizes map[string]int64) string {
	parts := []string{"all " + mb(total(sizes))}
	for _, name := range []string{"state_live", "state_live_pkey", "state_pending"} {
		if n, ok := sizes[name]; ok {
			parts = append(parts, name+" "+mb(n))
		}
	}
	for _, p := range []struct{ prefix, index, what string }{
		{"state_done_", "_idx", "state_done"}, {"message_", "_pkey", "message"},
	} {
		var sum int64
		count := 0
		for name, n := range sizes {
			if strings.HasPrefix(name, p.prefix) {
				sum += n
				if !strings.HasSuffix(name, p.index) {
					count++
				}
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s in %d partitions", p.what, mb(sum), count))
	}
	return strings.Join(parts, ", ")
}

// mb writes bytes as megabytes.
func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
