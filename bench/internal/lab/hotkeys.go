package lab

import (
	"context"
	"fmt"
	"time"
)

// The hot-key cases' sizes and targets (issue 35): a few keys carry the
// backlog of a no-op status-line stage of 8 workers, QUEUE_LIMIT 4.
const (
	hotKeys           = 8
	hotWorkers        = 8
	hotQueueLimit     = 4
	hotBesideBacklog  = 100_000
	hotBesideMessages = 20_000
	targetHotRate     = 2000.0 // msg/s at a backlog of 16 000, at least
	targetHotRatio    = 0.8    // a larger backlog's rate ÷ the rate at 2 000, at least
	targetHotLimit4   = 3.0    // KEY_LIMIT 4 ÷ KEY_LIMIT 1, at least
	targetHotBeside   = 0.8    // a keyless stage beside a keyed backlog ÷ alone, at least
)

// hotKeys measures a keyed stage with KEY_LIMIT 1 (and 4) over 8 keys at
// backlogs of 2 000, 16 000 and 100 000, and a keyless stage of the same
// dispatcher beside a keyed backlog against the same stage alone.
func (b *bench) hotKeys(ctx context.Context) error {
	one := func(name string, limit int) pipeline {
		return pipeline{name: name, mode: "statusline", stages: b.stages[:1], parallelism: []int{hotWorkers},
			queueLimit: hotQueueLimit, keys: hotKeys, keyed: true, keyLimit: limit}
	}
	rate := func(r runResult) float64 { return float64(r.messages) / r.elapsed.Seconds() }
	at := map[int]float64{}
	for _, backlog := range []int{2_000, 16_000, 100_000} {
		r, err := b.pipelineRun(ctx, one(fmt.Sprintf("hot keys %d", backlog), 1), backlog, false)
		if err != nil {
			return err
		}
		at[backlog] = rate(r)
	}
	r4, err := b.pipelineRun(ctx, one("hot keys limit 4", 4), 16_000, false)
	if err != nil {
		return err
	}
	name := func(backlog, limit int) string {
		return fmt.Sprintf("keyed stage (%d workers, QUEUE_LIMIT %d), %d keys, KEY_LIMIT = %d, backlog %d: messages",
			hotWorkers, hotQueueLimit, hotKeys, limit, backlog)
	}
	b.report.add(Figure{Key: "keys.hot2k", Name: name(2_000, 1), Value: at[2_000], Unit: "msg/s"})
	b.report.add(Figure{Key: "keys.hot16k", Name: name(16_000, 1), Value: at[16_000], Unit: "msg/s", Ceiling: at[2_000],
		Of: "backlog 2 000", Target: "≥ 2 000 msg/s and ≥ 0.8×",
		Met: atLeast(min(at[16_000]/targetHotRate, at[16_000]/at[2_000]/targetHotRatio), 1)})
	b.report.add(Figure{Key: "keys.hot100k", Name: name(100_000, 1), Value: at[100_000], Unit: "msg/s", Ceiling: at[2_000],
		Of: "backlog 2 000", Target: "≥ 0.8×", Met: atLeast(at[100_000]/at[2_000], targetHotRatio)})
	b.report.add(Figure{Key: "keys.hotlimit4", Name: name(16_000, 4), Value: rate(r4), Unit: "msg/s", Ceiling: at[16_000],
		Of: "KEY_LIMIT = 1", Target: "≥ 3×", Met: atLeast(rate(r4)/at[16_000], targetHotLimit4)})

	two := pipeline{name: "beside", mode: "statusline", stages: b.stages[:2], parallelism: []int{hotWorkers, hotWorkers},
		queueLimit: hotQueueLimit, keyed: true, keyFirst: true, apart: true}
	alone, err := b.besideRun(ctx, two, 0, hotBesideMessages)
	if err != nil {
		return err
	}
	beside, err := b.besideRun(ctx, two, hotBesideBacklog, hotBesideMessages)
	if err != nil {
		return err
	}
	b.report.add(Figure{Key: "keys.beside", Name: fmt.Sprintf("keyless stage (%d workers) beside a keyed stage's backlog of %d over %d keys: messages",
		hotWorkers, hotBesideBacklog, hotKeys), Value: beside, Unit: "msg/s", Ceiling: alone, Of: "the keyless stage alone",
		Target: "≥ 0.8×", Met: atLeast(beside/alone, targetHotBeside)})
	return b.reset(ctx)
}

// besideRun starts p's dispatcher, puts a backlog of backlog messages over
// hotKeys keys at p's first (keyed) stage, then n messages without a key
// at its second, and returns the second stage's rate: n ÷ the time from
// the first of them created to the last done.
func (b *bench) besideRun(ctx context.Context, p pipeline, backlog, n int) (float64, error) {
	if err := b.reset(ctx); err != nil {
		return 0, err
	}
	b.progress("%s: %d messages beside a keyed backlog of %d", p.name, n, backlog)
	d, err := b.startDispatcher(ctx, p)
	if err != nil {
		return 0, err
	}
	defer d.stop() //nolint:errcheck // a second stop is harmless
	if backlog > 0 {
		if err := b.seedKeyed(ctx, backlog, hotKeys, p.stages[0]); err != nil {
			return 0, err
		}
	}
	var first int64
	err = b.sql.QueryRow(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (payload) SELECT 'bench' FROM generate_series(1, $1) RETURNING id
), s AS (
    INSERT INTO pepsi.state (id, stage) SELECT id, $2 FROM m RETURNING id
)
SELECT min(id) FROM s`, n, p.stages[1]).Scan(&first)
	if err != nil {
		return 0, err
	}
	done := func(ctx context.Context) (bool, error) {
		var left int
		err := b.sql.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE stage = $1 AND id >= $2 AND status <> 'done'",
			p.stages[1], first).Scan(&left)
		return left == 0, err
	}
	if err := d.waitFor(ctx, "the keyless stage's messages not done", 10*time.Minute, done); err != nil {
		return 0, err
	}
	var secs float64
	err = b.sql.QueryRow(ctx, `
		SELECT extract(epoch FROM max(s.updated_at) - min(m.created_at))::float8
		  FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id >= $1 AND s.stage = $2`, first, p.stages[1]).Scan(&secs)
	if err != nil {
		return 0, err
	}
	if _, err := d.stop(); err != nil {
		return 0, err
	}
	return float64(n) / secs, nil
}
