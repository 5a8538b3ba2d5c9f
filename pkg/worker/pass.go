package worker

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// lockSQL reads a running message's rows and locks its queue row.
const lockSQL = messageSQL + " FOR UPDATE OF s"

// readSQL is the read of a pass's message in its transaction. A pass that
// came with its token (Message.Pass) reads without a lock: its move
// presents the token, and is refused once the dispatcher has given the
// pass up (timed out, settled, claimed again since), which rolls the
// stage's work back with it. A bare id locks the queue row, so that a
// settle of the pass (a timeout) waits for the pass to end.
func readSQL(pass int64) string {
	if pass != 0 {
		return messageSQL
	}
	return lockSQL
}

// pass runs fn for the message of l in a transaction and commits its move.
//
// A pass costs two round trips besides the stage's own statements. BEGIN
// goes out with the read of the message (pgx's Batch.BeginTx), the move
// with COMMIT. When the next id is already waiting (peek), its BEGIN and
// read go out with this COMMIT too, so that a pipelined message costs one
// round trip besides the stage's statements: on a small machine every
// round trip costs both sides tens of microseconds of CPU.
func (r *runner) pass(ctx context.Context, l idLine, peek func() (idLine, bool)) ([]protocol.Fused, error) {
	m, err := r.begin(ctx, l)
	committed := false
	defer func() {
		if !committed {
			r.rollback(m.Tx)
		}
	}()
	if err != nil {
		return nil, err
	}
	out, err := r.decide(ctx, m)
	if err != nil {
		return nil, err
	}
	if r.conn.PgConn().TxStatus() != 'T' {
		return nil, errors.New("the stage function ended the pass's transaction (m.Tx is committed with the move)")
	}
	sql, args := out.statement(m)
	commit := r.commitSQL()
	b := &pgx.Batch{}
	next, chain := peek()
	if chain {
		// The batch begins the next message's transaction, so that pgx
		// hands back a Tx for it; the stage's queued statements, the
		// move and COMMIT go ahead of that BEGIN. Results come back in
		// order: the queued statements', the move's, COMMIT's, then
		// BEGIN's and the read's.
		b.BeginTx(r.txo)
		begin := b.QueuedQueries
		b.QueuedQueries = append(m.queued, &pgx.QueuedQuery{SQL: sql, Arguments: args}, &pgx.QueuedQuery{SQL: commit})
		b.QueuedQueries = append(b.QueuedQueries, begin...)
		b.Queue(readSQL(next.pass), next.id)
	} else {
		b.QueuedQueries = m.queued
		b.Queue(sql, args...)
		b.Queue(commit)
	}
	br := r.conn.SendBatch(ctx, b)
	for range m.queued {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = execCommit(br)
	}
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	committed = true
	if chain {
		r.next = r.readNext(br, next)
	}
	if err := br.Close(); err != nil && !chain {
		return nil, err
	}
	return m.fused, nil
}

// decide runs the stage function for m and checks what it returns. An
// error is the pass's: nothing is to be committed, as also when ctx is
// done (told to stop: the pass is rolled back rather than committed now).
func (r *runner) decide(ctx context.Context, m *Message) (Move, error) {
	out, err := r.call(ctx, m)
	if err != nil {
		return Move{}, err
	}
	if err := checkFused(m.fused); err != nil {
		return Move{}, err
	}
	if err := out.check(m); err != nil {
		return Move{}, err
	}
	return out, ctx.Err()
}

// execCommit reads the result of a batch's COMMIT: a transaction that
// had failed answers COMMIT with ROLLBACK.
func execCommit(br pgx.BatchResults) error {
	tag, err := br.Exec()
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	return err
}

// commitSQL is the statement that commits a pass.
func (r *runner) commitSQL() string {
	if r.txo.CommitQuery != "" {
		return r.txo.CommitQuery
	}
	return "commit"
}

// begin opens the transaction of the message of l and reads it, or takes
// the one the last COMMIT opened for it. The Message is returned even with
// an error, its Tx to be rolled back.
func (r *runner) begin(ctx context.Context, l idLine) (*Message, error) {
	if m := r.next; m != nil {
		r.next = nil
		if m.ID == l.id && m.Pass == l.pass {
			return m, nil
		}
		r.rollback(m.Tx) // not the line that came: cannot happen, as lines are served in order
	}
	m := l.message()
	m.loaded = true
	b := &pgx.Batch{}
	b.BeginTx(r.txo)
	b.Queue(readSQL(l.pass), l.id)
	br := r.conn.SendBatch(ctx, b)
	m.Tx = br.Tx()
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return m.scan(br.QueryRow())
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, errNoMessage) {
		err = m.explain(ctx, m.Tx)
	}
	return m, err
}

// readNext reads the results of the next message's BEGIN and read that
// went out after a COMMIT, and returns the message, its transaction open,
// or nil when that failed; then the transaction is rolled back and the
// message is read again when it is served, which reports what went wrong.
func (r *runner) readNext(br pgx.BatchResults, l idLine) *Message {
	m := l.message()
	m.loaded, m.Tx = true, br.Tx()
	_, err := br.Exec()
	if err == nil {
		err = m.scan(br.QueryRow())
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.rollback(m.Tx)
		return nil
	}
	return m
}

// rollback ends transaction tx if one is still open on the connection.
// After a cancellation the connection may be gone, so the rollback gets a
// context of its own.
func (r *runner) rollback(tx pgx.Tx) {
	if tx == nil || r.conn == nil || r.conn.IsClosed() || r.conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// dropNext rolls back the transaction opened for a message that was not
// served.
func (r *runner) dropNext() {
	if m := r.next; m != nil {
		r.next = nil
		r.rollback(m.Tx)
	}
}
