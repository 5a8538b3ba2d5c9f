package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// oneTripPass runs fn for message id before anything is sent, then sends
// BEGIN, the statements fn queued, the move and COMMIT in one batch
// (OneTrip). No read locks the queue row first: the move's own UPDATE
// does, and raises if the message is no longer running, which rolls the
// queued work back with it.
func (r *runner) oneTripPass(ctx context.Context, id int64) (*Message, error) {
	m := &Message{ID: id, Stage: r.stage, r: r}
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
		tag, err := br.Exec()
		if err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.abort(conn)
		return nil, notRunning(err, id)
	}
	return m, nil
}

// abort rolls back the transaction a failed batch left open. After a
// cancellation the connection may be gone, so it gets a context of its own.
func (r *runner) abort(conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "rollback")
}

// notRunning words the move's refusal as the default mode's read does.
func notRunning(err error, id int64) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55000" {
		return fmt.Errorf("message %d is not running: %w", id, err)
	}
	return err
}
