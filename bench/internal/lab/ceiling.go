package lab

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// commitCeiling runs ceilingSQL as single-statement transactions on conns
// connections, each on its own row, for d, and returns the transactions
// per second, (on one connection) each transaction's latency, and what
// the database used per transaction.
func (b *bench) commitCeiling(ctx context.Context, conns int, d time.Duration) (float64, []time.Duration, perTx, error) {
	var per perTx
	if err := b.seedCeiling(ctx, conns); err != nil {
		return 0, nil, per, err
	}
	cs := make([]*pgx.Conn, conns)
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	for i := range cs {
		c, err := pgx.Connect(ctx, b.dsn)
		if err != nil {
			return 0, nil, per, fmt.Errorf("commit ceiling: connection %d of %d: %w", i+1, conns, err)
		}
		cs[i] = c
		if _, err := c.Exec(ctx, ceilingSQL, i+1); err != nil { // prepared, warm
			return 0, nil, per, err
		}
	}
	s0, err := b.sample(ctx, 0)
	if err != nil {
		return 0, nil, per, err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		lat   []time.Duration
		first error
	)
	start := time.Now()
	deadline := start.Add(d)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			var mine []time.Duration
			for {
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				if _, err := c.Exec(ctx, ceilingSQL, i+1); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				n++
				if conns == 1 {
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			total += n
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return 0, nil, per, first
	}
	s1, err := b.sample(ctx, 0)
	if err != nil {
		return 0, nil, per, err
	}
	return float64(total) / elapsed.Seconds(), lat, s1.since(s0).per(total), nil
}

// perTx is a usage per transaction or per stage pass.
type perTx struct {
	backends    time.Duration
	workers     time.Duration
	checkpoints int64 // in the whole measurement
}

func (u usage) per(n int) perTx {
	if n == 0 {
		return perTx{}
	}
	return perTx{backends: u.backends / time.Duration(n), workers: u.workers / time.Duration(n), checkpoints: u.checkpoints}
}

// turnCeiling moves messages through the stages with the dispatcher's own
// batched statement (pkg/queue RunTurn: settle the last claim's transitions
// and claim again, one round trip) and no worker processes, for at most d:
// the database's ceiling for a pipeline whose stages answer on the status
// line. Each stage claims up to what p's workers hold (PARALLELISM ×
// QUEUE_LIMIT) a turn. It returns stage passes per second.
func (b *bench) turnCeiling(ctx context.Context, p pipeline, n int, d time.Duration) (float64, error) {
	if err := b.reset(ctx); err != nil {
		return 0, err
	}
	if _, err := b.enqueueBatch(ctx, n); err != nil {
		return 0, err
	}
	next := map[string]string{}
	for i, s := range b.stages {
		if i+1 < len(b.stages) {
			next[s] = b.stages[i+1]
		}
	}
	caps := make([]queue.StageCap, len(b.stages))
	for i, s := range b.stages {
		caps[i] = queue.StageCap{Stage: s, Cap: p.parallelism[i] * p.queueLimit}
	}
	var res queue.TurnResult
	var settles []queue.Settle
	passes := 0
	start := time.Now()
	for time.Since(start) < d {
		t := queue.Turn{Settles: settles, Caps: caps}
		if err := b.db.RunTurn(ctx, t, &res); err != nil {
			return 0, err
		}
		passes += len(settles)
		if len(res.Claimed) == 0 && len(settles) == 0 {
			break
		}
		settles = settles[:0]
		for _, c := range res.Claimed {
			v := queue.Settle{ID: c.ID, Stage: c.Stage, Verdict: queue.Finish}
			if nx := next[c.Stage]; nx != "" {
				v.Verdict, v.Next = queue.Advance, nx
			}
			settles = append(settles, v)
		}
	}
	return float64(passes) / time.Since(start).Seconds(), nil
}
