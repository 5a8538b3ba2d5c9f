package queue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Turn is the dispatcher's queue work for one wake, done in one round trip
// and one transaction, in this order: resume due paused rows, settle
// verdicts, claim. Each part is optional.
type Turn struct {
	Resume  bool
	Settles []Settle
	Caps    []StageCap
}

// TurnResult is what a Turn did. Its slices are reused by the next Turn
// given the same result.
type TurnResult struct {
	Resumed    int64
	NextPaused time.Time // zero: no paused row left (only set when Resume)
	Settled    []Settled
	Claimed    []Claimed
	waits      []Claimed // the claim's scratch space
}

// RunTurn sends t as one batch and fills res.
func (db *DB) RunTurn(ctx context.Context, t Turn, res *TurnResult) error {
	claim, hasClaim := claimArgs(t.Caps)
	var settle []any
	if len(t.Settles) > 0 {
		settle = settleArgs(t.Settles)
	}
	return retry(ctx, func() error {
		res.Resumed, res.NextPaused = 0, time.Time{}
		res.Settled, res.Claimed = res.Settled[:0], res.Claimed[:0]
		b := &pgx.Batch{}
		if t.Resume {
			b.Queue(resumeSQL)
		}
		if settle != nil {
			b.Queue(settleSQL, settle...)
		}
		if hasClaim {
			b.Queue(claimSQL, claim...)
		}
		if b.Len() == 0 {
			return nil
		}
		br := db.Pool.SendBatch(ctx, b)
		defer br.Close()
		var err error
		if t.Resume {
			var next *time.Time
			if err = br.QueryRow().Scan(&res.Resumed, &next); err != nil {
				return err
			}
			if next != nil {
				res.NextPaused = *next
			}
		}
		if settle != nil {
			rows, err := br.Query()
			if res.Settled, err = scanSettled(rows, err, res.Settled); err != nil {
				return err
			}
		}
		if hasClaim {
			rows, err := br.Query()
			if res.Claimed, res.waits, err = scanClaimed(rows, err, res.Claimed, res.waits[:0]); err != nil {
				return err
			}
		}
		return br.Close()
	})
}
