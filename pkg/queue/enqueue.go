package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what a statement runs on: the pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Enqueue inserts one message at stage and returns its id. q may be an
// application's own transaction (the transactional outbox).
func Enqueue(ctx context.Context, q Querier, stage string, payload []byte, headers map[string]string) (int64, error) {
	h, err := encodeHeaders(headers)
	if err != nil {
		return 0, err
	}
	if payload == nil {
		payload = []byte{}
	}
	var id int64
	err = q.QueryRow(ctx, "SELECT pepsi.enqueue($1, $2, $3)", stage, payload, h).Scan(&id)
	return id, err
}

// Keyed is one message for EnqueueKeyed.
type Keyed struct {
	Stage    string
	Payload  []byte
	Headers  map[string]string
	Priority int32  // lower is claimed first within a stage
	Key      string // deduplication key; "" for none
	// RunAt, when set, schedules the message: it is not claimed before
	// then (it waits as paused; see sql/functions/20_enqueue.sql).
	RunAt time.Time
}

// EnqueueKeyed inserts m unless m.Key is held by an unfinished (pending,
// running, paused or held) message: then it returns that message's id and
// created false. Concurrent callers with one key get one message.
func EnqueueKeyed(ctx context.Context, q Querier, m Keyed) (id int64, created bool, err error) {
	h, err := encodeHeaders(m.Headers)
	if err != nil {
		return 0, false, err
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	var key *string
	if m.Key != "" {
		key = &m.Key
	}
	var runAt *time.Time
	if !m.RunAt.IsZero() {
		runAt = &m.RunAt
	}
	err = q.QueryRow(ctx, "SELECT id, created FROM pepsi.enqueue_key($1, $2, $3, $4, $5, $6)",
		m.Stage, m.Payload, h, m.Priority, key, runAt).Scan(&id, &created)
	return id, created, err
}

// EnqueueKeyed is EnqueueKeyed on db's pool.
func (db *DB) EnqueueKeyed(ctx context.Context, m Keyed) (int64, bool, error) {
	return EnqueueKeyed(ctx, db.pool, m)
}

func encodeHeaders(headers map[string]string) ([]byte, error) {
	if len(headers) == 0 {
		return []byte("{}"), nil
	}
	return json.Marshal(headers)
}

// Bulk is a batch of messages for one stage, all with the same headers.
type Bulk struct {
	Stage    string
	Headers  map[string]string
	Priority int32 // lower is claimed first within a stage
	// RunAt, when set, schedules the messages: they wait as paused until
	// then, without a flow key (they take their key's place when they
	// fall due), and every dispatcher is woken to learn when.
	RunAt    time.Time
	Payloads [][]byte
	// Progress, when set, is called with the number of rows copied so far.
	Progress func(copied int)
}

// reserveSQL takes n ids from the message id sequence in one statement:
// nextval is safe under concurrency (a setval-style reservation of a range
// is not). The sequence is named as a constant, looked up once at planning:
// the former per-row nextval(pg_get_serial_sequence(…)) cost more server
// CPU than the nextval calls themselves. 001_schema.sql's identity column
// owns this sequence (TestEnqueueBulk would notice a rename).
const reserveSQL = "SELECT nextval('pepsi.message_id_seq'::regclass) FROM generate_series(1, $1)"

// EnqueueBulk inserts every payload of b with COPY in one transaction and
// returns the new ids in payload order. Nothing is inserted on error.
//
// Server CPU is what limits it (the client's is a tenth of it): per
// message, one message row and one state row with their index entries. Without headers the headers column is left to its
// default, so that no JSON is parsed per row (pepsi bench measures it).
func (db *DB) EnqueueBulk(ctx context.Context, b Bulk) ([]int64, error) {
	if len(b.Payloads) == 0 {
		return nil, fmt.Errorf("no messages to enqueue")
	}
	if b.Stage == "" {
		// pepsi.enqueue refuses this too; COPY bypasses it.
		return nil, fmt.Errorf("stage must not be empty")
	}
	h, err := encodeHeaders(b.Headers)
	if err != nil {
		return nil, err
	}
	var ids []int64
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		ids = ids[:0]
		rows, err := tx.Query(ctx, reserveSQL, len(b.Payloads))
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		cols := []string{"id", "payload"}
		row := make([]any, 2, 3)
		if len(b.Headers) > 0 {
			cols = append(cols, "headers") // else the column default, '{}': no JSON to parse per row
			row = append(row, h)
		}
		msgs := &copySource{n: len(ids), progress: b.Progress, row: func(i int) []any {
			p := b.Payloads[i]
			if p == nil {
				p = []byte{}
			}
			row[0], row[1] = ids[i], p
			return row
		}}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pepsi", "message"}, cols, msgs); err != nil {
			return err
		}
		cols = []string{"id", "stage"}
		state := []any{nil, b.Stage}
		if b.Priority != 0 {
			cols = append(cols, "priority") // else the column default, 0
			state = append(state, b.Priority)
		}
		if !b.RunAt.IsZero() {
			cols = append(cols, "status", "timeout")
			state = append(state, string(Paused), b.RunAt)
		} else if len(b.Headers) > 0 {
			// Their key at a stage with KEY (the same for every message:
			// they share their headers), read in this transaction.
			var key *string
			if err := tx.QueryRow(ctx, flowKeySQL, b.Stage, h).Scan(&key); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if key != nil {
				cols = append(cols, "flow_key")
				state = append(state, *key)
			}
		}
		states := &copySource{n: len(ids), row: func(i int) []any {
			state[0] = ids[i]
			return state
		}}
		if _, err = tx.CopyFrom(ctx, pgx.Identifier{"pepsi", "state_live"}, cols, states); err != nil || b.RunAt.IsZero() {
			return err
		}
		// Armed or not, a dispatcher must learn when they fall due.
		_, err = tx.Exec(ctx, "SELECT pg_notify(s.ingress_channel, '') FROM pepsi.settings s")
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// copySource feeds COPY from an indexed row function.
type copySource struct {
	n, i     int
	row      func(int) []any
	progress func(int)
}

func (c *copySource) Next() bool {
	if c.progress != nil && c.i > 0 && c.i%10000 == 0 {
		c.progress(c.i)
	}
	c.i++
	if c.i > c.n {
		if c.progress != nil {
			c.progress(c.n)
		}
		return false
	}
	return true
}
func (c *copySource) Values() ([]any, error) { return c.row(c.i - 1), nil }
func (c *copySource) Err() error             { return nil }
