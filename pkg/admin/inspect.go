package admin

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Count is how many messages one stage has in one status.
type Count struct {
	Stage  string
	Status queue.Status
	N      int64
	// Oldest is when the oldest of them was last updated.
	Oldest time.Time
}

// Counts returns the number of messages per stage and status; messages
// that pepsi.enqueue() wrote and no one has admitted yet count as pending
// at their stage, since their enqueue.
func (db *DB) Counts(ctx context.Context) ([]Count, error) {
	rows, err := db.pool.Query(ctx, `SELECT stage, status, sum(n)::bigint, min(oldest) FROM (
		SELECT stage, status, count(*) AS n, min(updated_at) AS oldest FROM pepsi.state GROUP BY stage, status
		UNION ALL
		SELECT stage, 'pending', count(*), min(created_at) FROM pepsi.ingress GROUP BY stage
	) c GROUP BY stage, status ORDER BY stage, status`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Count, error) {
		var c Count
		var st string
		err := r.Scan(&c.Stage, &st, &c.N, &c.Oldest)
		c.Status = queue.Status(st)
		return c, err
	})
}

// Row is one message's queue state.
type Row struct {
	ID            int64        `json:"id"`
	Stage         string       `json:"stage"`
	Status        queue.Status `json:"status"`
	Attempts      int          `json:"attempts"`
	Priority      int32        `json:"priority"`
	Key           *string      `json:"key,omitempty"` // deduplication key
	CreatedAt     time.Time    `json:"created_at"`
	UpdatedAt     time.Time    `json:"updated_at"`
	Timeout       *Time        `json:"timeout,omitempty"`
	DispatchError *string      `json:"dispatch_error,omitempty"`
	Error         *string      `json:"error,omitempty"`
}

// ListParams filters List; zero values do not filter.
type ListParams struct {
	Stage     string
	Status    queue.Status
	OlderThan time.Duration // last updated longer ago than this
	Parent    int64         // children of this message (0: any)
	Search                  // in the headers and payload, within a time bound
	AfterID   int64         // ids greater than this (paging)
	Limit     int           // at most this many (0: no limit)
}

// rowColumns are the columns scanRow reads, with the first n+1
// characters of the error texts (see cutText).
func rowColumns(n int) string {
	sub := func(col string) string { return "substr(" + col + ", 1, " + strconv.Itoa(n+1) + ")" }
	return `s.id, s.stage, s.status, s.attempts, s.priority, s.dedup_key, m.created_at, s.updated_at, s.timeout, ` +
		sub("s.dispatch_error") + ", " + sub("s.error")
}

// rowDest are the fields of x that rowColumns fill, in their order.
func rowDest(x *Row, st *string, timeout **time.Time) []any {
	return []any{&x.ID, &x.Stage, st, &x.Attempts, &x.Priority, &x.Key, &x.CreatedAt, &x.UpdatedAt, timeout, &x.DispatchError, &x.Error}
}

// finish sets what rowDest read into its own types, and cuts the error
// texts to n characters (see cutText).
func (x *Row) finish(st string, timeout *time.Time, n int) {
	x.Status = queue.Status(st)
	if timeout != nil {
		x.Timeout = &Time{*timeout}
	}
	x.Error, x.DispatchError = cutText(x.Error, n), cutText(x.DispatchError, n)
}

// cutText cuts *s to n characters, the last of them "…", when it is
// longer: rowColumns read n+1 of them, so that a list never reads a long
// error whole and still says that it was cut.
func cutText(s *string, n int) *string {
	if s == nil || utf8.RuneCountInString(*s) <= n {
		return s
	}
	c := cutRunes(*s, n-1) + "…"
	return &c
}

// scanRow reads a row of rowColumns(MaxErrorList).
func scanRow(r pgx.CollectableRow) (Row, error) {
	var x Row
	var st string
	var timeout *time.Time
	err := r.Scan(rowDest(&x, &st, &timeout)...)
	x.finish(st, timeout, MaxErrorList)
	return x, err
}

// List returns the messages that match p in id order. The bound on m.id
// repeats the one on s.id because the planner does not carry a range
// across the join: without it, the merge join walks message_pkey from the
// start for every page, and paging through the queue becomes quadratic
// (250 pages of 1000 out of 500 000 rows: 19 s instead of 3.4 s).
//
// A search (p.Search) starts at its window's first id, and each of its
// statements stops after SearchTimeout (ErrSearchTimeout).
func (db *DB) List(ctx context.Context, p ListParams) ([]Row, error) {
	limit := int64(p.Limit)
	if limit <= 0 {
		limit = -1
	}
	if err := db.resolve(ctx, &p.Search); err != nil {
		return nil, err
	}
	var st statement
	args := []any{p.Stage, string(p.Status), p.OlderThan, max(p.AfterID, p.from-1), limit}
	for _, a := range args {
		st.arg(a)
	}
	search := ""
	if mc := p.messageConds(st.arg); len(mc) > 0 {
		search = " AND " + strings.Join(mc, " AND ")
	}
	if p.Parent > 0 {
		search += " AND s.parent = " + st.arg(p.Parent) // state_parent
	}
	var got []Row
	err := db.read(ctx, &p.Search, func(q querier) error {
		rows, err := q.Query(ctx, `SELECT `+rowColumns(MaxErrorList)+`
		  FROM pepsi.state s JOIN pepsi.message m USING (id)
		 WHERE ($1 = '' OR s.stage = $1)
		   AND ($2 = '' OR s.status = $2)
		   AND s.updated_at <= now() - $3::interval
		   AND s.id > $4 AND m.id > $4`+search+`
		 ORDER BY s.id
		 LIMIT CASE WHEN $5::bigint < 0 THEN NULL ELSE $5::bigint END`, st.args...)
		if err != nil {
			return err
		}
		got, err = pgx.CollectRows(rows, scanRow)
		return err
	})
	return got, err
}

// Message is a message's state with its headers and payload size.
type Message struct {
	Row
	Headers     json.RawMessage `json:"headers"`
	PayloadSize int             `json:"payload_size"`
	// FlowKey is its key at a stage with KEY (KEY, KEY_LIMIT), and
	// Behind the earliest unfinished message of that key there with a
	// lower id, while it is pending, paused or held.
	FlowKey *string `json:"flow_key,omitempty"`
	Behind  *int64  `json:"waits_behind,omitempty"`
	// History is its failed passes, oldest first (History).
	History []Pass `json:"history"`
	// Its graph (schema 26): the message that spawned it, its children
	// (nil when none), and the result its stage left (nil when none).
	Parent   *Relative `json:"parent,omitempty"`
	Children *Children `json:"children,omitempty"`
	Result   *Result   `json:"result,omitempty"`
}

// behindSQL is the earliest unfinished message of row s's key at its
// stage with a lower id (pending, paused and held ones by state_flow,
// running ones by state_running), while s is pending, paused or held.
const behindSQL = `CASE WHEN s.flow_key IS NOT NULL AND s.status IN ('pending', 'paused', 'held') THEN least(
    (SELECT min(e.id) FROM pepsi.state e WHERE e.stage = s.stage AND e.flow_key = s.flow_key AND e.id < s.id
                                          AND e.status IN ('pending', 'paused', 'held')),
    (SELECT min(e.id) FROM pepsi.state e WHERE e.status = 'running' AND e.id < s.id
                                          AND e.stage = s.stage AND e.flow_key = s.flow_key)) END`

// Show returns one message, with its history, or ErrNotFound.
func (db *DB) Show(ctx context.Context, id int64) (*Message, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+rowColumns(MaxErrorShow)+`, m.headers, octet_length(m.payload), s.flow_key, `+behindSQL+`
		  FROM pepsi.state s JOIN pepsi.message m USING (id) WHERE s.id = $1`, id)
	if err != nil {
		return nil, err
	}
	m, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (Message, error) {
		var x Message
		var st string
		var timeout *time.Time
		err := r.Scan(append(rowDest(&x.Row, &st, &timeout), &x.Headers, &x.PayloadSize, &x.FlowKey, &x.Behind)...)
		x.finish(st, timeout, MaxErrorShow)
		return x, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if m.History, err = db.History(ctx, id); err != nil {
		return nil, err
	}
	if m.History == nil {
		m.History = []Pass{} // "history": [] in its JSON, not null
	}
	if err := db.family(ctx, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Payload returns one message's payload, or ErrNotFound.
func (db *DB) Payload(ctx context.Context, id int64) ([]byte, error) {
	var p []byte
	err := db.pool.QueryRow(ctx, "SELECT payload FROM pepsi.message WHERE id = $1", id).Scan(&p)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return p, err
}
