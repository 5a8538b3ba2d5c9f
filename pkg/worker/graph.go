package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaxResult is the longest result a stage may leave with FinishWith
// (pepsi.finish's p_result): 64 KiB.
const MaxResult = 64 << 10

// SpawnOptions are a child's own headers, priority and deduplication key;
// the zero value is none, 0 and none. A child whose headers have no
// traceparent gets that of the span ctx carries (the pass's, or one the
// stage started from it), or else its parent's trace context
// (pepsi.spawn).
type SpawnOptions struct {
	Headers  map[string]string // the child's headers (a flow KEY at its stage reads them)
	Priority int               // lower is claimed first within its stage
	Key      string            // a deduplication key (Spawn only): no child while a message holding it is unfinished
}

// Child is one child of a message, as its join stage reads it
// (pepsi.children).
type Child struct {
	ID        int64
	Stage     string    // where it is, or ended
	Status    string    // pending, running, paused, held, waiting, done, failed or cancelled
	Error     string    // why a failed or cancelled child ended so; "" otherwise
	Result    []byte    // what its stage left with FinishWith; nil when none
	UpdatedAt time.Time // its last change
}

// errNoTx refuses a graph call in OnStatusLine mode.
var errNoTx = errors.New("spawning children needs the pass's transaction (the default mode or OneTrip, not OnStatusLine)")

// spawnSQL and spawnManySQL are the SQL API's calls that make children
// (sql/functions/30_graph.sql); a NULL pass is a bare id's.
const (
	spawnSQL     = "SELECT pepsi.spawn($1::int8, $2::text, $3::bytea, $4::jsonb, $5::int4, $6::text, $7::int8)"
	spawnManySQL = "SELECT pepsi.spawn_many($1::int8, $2::text, $3::bytea[], $4::jsonb, $5::int4, $6::int8)"
	childrenSQL  = "SELECT id, stage, status, coalesce(error, ''), result, updated_at FROM pepsi.children($1::int8)"
)

// spawnArgs are the arguments the spawn calls share: headers as JSON
// text, the pass's token or NULL.
func (m *Message) spawnArgs(ctx context.Context, o *SpawnOptions) (headers, pass any, err error) {
	if h := traceHeaders(ctx, o); h != nil {
		b, err := json.Marshal(h)
		if err != nil {
			return nil, nil, fmt.Errorf("headers: %w", err)
		}
		headers = string(b)
	}
	if m.Pass != 0 {
		pass = m.Pass
	}
	return headers, pass, nil
}

// Spawn makes one child of the message, pending at stage with payload,
// in the pass's transaction, and returns its id: the dispatcher sees it
// when the pass commits, with the move (worker.Join, usually). In OneTrip
// mode the child is made with the move (as Message.Queue) and the id
// returned is 0; OnStatusLine mode has no transaction and refuses it. The
// server refuses a message not running (this pass), a stage name that is
// not one, a key held by an unfinished message, and a child more than
// pepsi.spawn_depth() (16) levels below the message first enqueued.
func (m *Message) Spawn(ctx context.Context, stage string, payload []byte, o *SpawnOptions) (int64, error) {
	headers, pass, err := m.spawnArgs(ctx, o)
	if err != nil {
		return 0, err
	}
	var prio int
	var key any
	if o != nil {
		prio = o.Priority
		if o.Key != "" {
			key = o.Key
		}
	}
	if payload == nil {
		payload = []byte{}
	}
	args := []any{m.ID, stage, payload, headers, prio, key, pass}
	switch {
	case m.Tx != nil:
		var id int64
		err := m.Tx.QueryRow(ctx, spawnSQL, args...).Scan(&id)
		return id, err
	case m.r != nil && m.r.mode == OneTrip:
		m.Queue(spawnSQL, args...)
		return 0, nil
	}
	return 0, errNoTx
}

// SpawnMany makes one child of the message per payload, all pending at
// stage with the same headers and priority, in one statement, and returns
// how many; none makes none (a Join then goes straight on). As Spawn, but
// with no deduplication key.
func (m *Message) SpawnMany(ctx context.Context, stage string, payloads [][]byte, o *SpawnOptions) (int64, error) {
	if o != nil && o.Key != "" {
		return 0, errors.New("SpawnMany makes no child with a key: spawn a keyed child with Spawn")
	}
	headers, pass, err := m.spawnArgs(ctx, o)
	if err != nil {
		return 0, err
	}
	var prio int
	if o != nil {
		prio = o.Priority
	}
	if payloads == nil {
		payloads = [][]byte{}
	}
	args := []any{m.ID, stage, payloads, headers, prio, pass}
	switch {
	case m.Tx != nil:
		var n int64
		err := m.Tx.QueryRow(ctx, spawnManySQL, args...).Scan(&n)
		return n, err
	case m.r != nil && m.r.mode == OneTrip:
		m.Queue(spawnManySQL, args...)
		return int64(len(payloads)), nil
	}
	return 0, errNoTx
}

// Children reads the message's children, in the order they were spawned:
// what a join stage reads of its fan-out (pepsi.children). In the default
// mode it reads in the pass's transaction; in OnStatusLine and OneTrip
// modes in a query of its own.
func (m *Message) Children(ctx context.Context) ([]Child, error) {
	var q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	} = m.Tx
	if m.Tx == nil {
		if m.r == nil {
			return nil, errors.New("worker: Children outside a pass")
		}
		conn, err := m.r.db(ctx)
		if err != nil {
			return nil, err
		}
		q = conn
	}
	rows, err := q.Query(ctx, childrenSQL, m.ID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Child, error) {
		var c Child
		err := row.Scan(&c.ID, &c.Stage, &c.Status, &c.Error, &c.Result, &c.UpdatedAt)
		return c, err
	})
}
