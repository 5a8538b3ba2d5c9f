package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The keys step's sizes and targets (issue 16).
const (
	benchKeys         = 1_000     // distinct keys of the pipelines
	benchClaimKeys    = 100_000   // distinct keys of the claim timing
	benchKeyRows      = 1_000_000 // pending rows of the claim timing
	benchKeyHeld      = 64        // keys the claim is told are in flight
	benchKeyCap       = 64        // the claim's cap
	targetKeyClaim    = 2.0       // keyed claim ÷ plain claim, at most
	targetKeyPipeline = 0.7       // keyed pipeline ÷ unkeyed, at least
)

// keys measures KEY = header:customer, KEY_LIMIT = 1 over benchKeys keys:
// the status-line pipeline's throughput with every stage keyed against the
// same pipeline without KEY (the same messages, with the header, in both),
// and the claim at a keyed stage with benchKeyRows pending rows against
// the plain claim of the same rows.
func (b *bench) keys(ctx context.Context) error {
	p := b.newPipeline("keys off", "statusline", b.o.Stages*b.o.Parallelism)
	p.keys = benchKeys
	off, err := b.pipelineRun(ctx, p, b.o.Messages, false)
	if err != nil {
		return err
	}
	p.name, p.keyed = "keys on", true
	on, err := b.pipelineRun(ctx, p, b.o.Messages, false)
	if err != nil {
		return err
	}
	rate := func(r runResult) float64 { return float64(r.messages) / r.elapsed.Seconds() }
	b.report.add(Figure{Key: "keys.pipeline", Name: fmt.Sprintf("status-line pipeline (%d stages, %d workers), KEY_LIMIT = 1 over %d keys at every stage: messages",
		len(p.stages), p.workers(), benchKeys), Value: rate(on), Unit: "msg/s", Ceiling: rate(off), Of: "the same pipeline without KEY",
		Target: "≥ 0.7×", Met: atLeast(rate(on)/rate(off), targetKeyPipeline), Load: on.load})

	if err := b.hotKeys(ctx); err != nil {
		return err
	}
	if err := b.reset(ctx); err != nil {
		return err
	}
	b.progress("keys: claim with %d pending rows over %d keys (building them)", benchKeyRows, benchClaimKeys)
	if err := b.seedKeyed(ctx, benchKeyRows, benchClaimKeys, b.stages[0]); err != nil {
		return err
	}
	held := make([]queue.HeldKey, benchKeyHeld)
	for i := range held {
		held[i] = queue.HeldKey{Key: fmt.Sprintf("c%d", i*7%benchClaimKeys), N: 1}
	}
	plain := []queue.StageCap{{Stage: b.stages[0], Cap: benchKeyCap}}
	keyed := []queue.StageCap{{Stage: b.stages[0], Cap: benchKeyCap, KeyLimit: 1, Held: held}}
	var tPlain, tKeyed []time.Duration
	for range 200 { // alternated: both see the same machine
		for _, c := range []struct {
			caps []queue.StageCap
			ds   *[]time.Duration
		}{{plain, &tPlain}, {keyed, &tKeyed}} {
			n, took, err := b.timeClaim(ctx, c.caps)
			if err != nil {
				return err
			}
			if n != benchKeyCap {
				return fmt.Errorf("keys: a claim took %d rows, want %d", n, benchKeyCap)
			}
			*c.ds = append(*c.ds, took)
		}
	}
	mp, mk := percentiles(tPlain, 0.5)[0], percentiles(tKeyed, 0.5)[0]
	b.report.add(Figure{Key: "keys.claim", Name: fmt.Sprintf("claim (%d) at a stage with KEY_LIMIT = 1, %d pending rows over %d keys, %d keys in flight, median of 200",
		benchKeyCap, benchKeyRows, benchClaimKeys, benchKeyHeld), Value: ms(mk), Unit: "ms", Ceiling: ms(mp), Of: "the plain claim of the same rows",
		Target: "≤ 2×", Met: atMost(ms(mk)/ms(mp), targetKeyClaim)})
	return b.reset(ctx)
}
