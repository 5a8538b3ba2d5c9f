package lab

import (
	"context"
	"fmt"
	"slices"
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

// hotRounds is how many times each hot-key case runs, interleaved; the
// median counts. A case of 2 000 messages lasts under a second, and its
// rate moves with the disk's flush time from one run to the next.
const hotRounds = 3

// hotKeys measures a keyed stage with KEY_LIMIT 1 (and 4) over 8 keys at
// backlogs of 2 000, 16 000 and 100 000, and a keyless stage of the same
// dispatcher beside a keyed backlog against the same stage alone.
func (b *bench) hotKeys(ctx context.Context) error {
	one := func(name string, limit int) pipeline {
		return pipeline{name: name, mode: "statusline", stages: b.stages[:1], parallelism: []int{hotWorkers},
			queueLimit: hotQueueLimit, keys: hotKeys, keyed: true, keyLimit: limit}
	}
	type hotCase struct {
		backlog, limit int
		rates          []float64
	}
	cases := []*hotCase{{backlog: 2_000, limit: 1}, {backlog: 16_000, limit: 1}, {backlog: 100_000, limit: 1}, {backlog: 16_000, limit: 4}}
	for round := 1; round <= hotRounds; round++ {
		for _, c := range cases {
			name := fmt.Sprintf("hot keys %d", c.backlog)
			if c.limit > 1 {
				name = fmt.Sprintf("hot keys limit %d", c.limit)
			}
			r, err := b.pipelineRun(ctx, one(fmt.Sprintf("%s, round %d of %d", name, round, hotRounds), c.limit), c.backlog, false)
			if err != nil {
				return err
			}
			c.rates = append(c.rates, float64(r.messages)/r.elapsed.Seconds())
		}
	}
	med := make([]float64, len(cases))
	for i, c := range cases {
		slices.Sort(c.rates)
		med[i] = c.rates[len(c.rates)/2]
	}
	at2k, at16k, at100k, limit4 := med[0], med[1], med[2], med[3]
	name := func(backlog, limit int) string {
		return fmt.Sprintf("keyed stage (%d workers, QUEUE_LIMIT %d), %d keys, KEY_LIMIT = %d, backlog %d: messages, median of %d",
			hotWorkers, hotQueueLimit, hotKeys, limit, backlog, hotRounds)
	}
	b.report.add(Figure{Key: "keys.hot2k", Name: name(2_000, 1), Value: at2k, Unit: "msg/s"})
	b.report.add(Figure{Key: "keys.hot16k", Name: name(16_000, 1), Value: at16k, Unit: "msg/s", Ceiling: at2k,
		Of: "backlog 2 000", Target: "≥ 2 000 msg/s and ≥ 0.8×",
		Met: atLeast(min(at16k/targetHotRate, at16k/at2k/targetHotRatio), 1)})
	b.report.add(Figure{Key: "keys.hot100k", Name: name(100_000, 1), Value: at100k, Unit: "msg/s", Ceiling: at2k,
		Of: "backlog 2 000", Target: "≥ 0.8×", Met: atLeast(at100k/at2k, targetHotRatio)})
	b.report.add(Figure{Key: "keys.hotlimit4", Name: name(16_000, 4), Value: limit4, Unit: "msg/s", Ceiling: at16k,
		Of: "KEY_LIMIT = 1", Target: "≥ 3×", Met: atLeast(limit4/at16k, targetHotLimit4)})

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
	// The workers' capacity: what KEY_LIMIT 4 over 8 keys (32 in flight,
	// as many as the 8 workers take) could reach at most.
	b.report.add(Figure{Key: "keys.hotlimit4cap", Name: name(16_000, 4) + ", against the workers' capacity",
		Value: limit4, Unit: "msg/s", Ceiling: alone, Of: "the keyless stage alone (8 workers)"})
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
