package worker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// oneTripPass runs fn for the message of l before anything is sent, then
// sends BEGIN, the statements fn queued, the move and COMMIT in one batch
// (OneTrip). No read locks the queue row first: the move's own UPDATE
// does, and raises if the message is no longer running (with the pass's
// token: no longer running this pass), which rolls the queued work back
// with it.
func (r *runner) oneTripPass(ctx context.Context, l idLine) ([]protocol.Fused, error) {
	m := l.message()
	m.Stage, m.r = r.stage, r
	out, err := r.decide(ctx, m)
	if err != nil {
		return nil, err
	}
	conn, err := r.db(ctx)
	if err != nil {
		return nil, err
	}
	sql, args := out.statement(m)
	b := &pgx.Batch{}
	b.BeginTx(r.txo)
	b.QueuedQueries = append(b.QueuedQueries, m.queued...)
	b.Queue(sql, args...)
	b.Queue(r.commitSQL())
	br := conn.SendBatch(ctx, b)
	err = func() error {
		for range len(m.queued) + 2 { // BEGIN, the queued statements, the move
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return execCommit(br)
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.rollback(br.Tx()) // a batch that failed after BEGIN leaves it open
		return nil, err     // a move refused names the message: "pepsi.advance: message N is not running"
	}
	return m.fused, nil
}
