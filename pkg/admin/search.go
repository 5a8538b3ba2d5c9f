package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Search in what messages carry: a header's value, text in the payload.
// Neither has an index (a GIN index of the headers would cost every
// enqueue), so a search is bounded twice: in time, by the messages
// enqueued within Since, an id range (ids are drawn in ingress order),
// found by bisecting message ids, so that the scan starts at the window's
// first message and never below it; and by SearchTimeout, each of its
// statements stopped after that long, so that a window holding more than
// the server can read in time gives a clear error rather than a page that
// does not come.

// DefaultSince is the time bound of a search that gives none: a day of
// messages, what an operator looking for yesterday's order asks about,
// and a seventh of the done messages RETENTION keeps by default.
const DefaultSince = 24 * time.Hour

// SearchTimeout is how long one statement of a search may run.
var SearchTimeout = 10 * time.Second

// ErrSearchTimeout is a search stopped by SearchTimeout.
var ErrSearchTimeout = errors.New("the search stopped after its time limit")

// Header is a header filter: the header Key has the value Value (its
// text, for a header that is not a string).
type Header struct{ Key, Value string }

// ParseHeader reads KEY=VALUE (VALUE may be empty, KEY may not; the
// first '=' ends the key).
func ParseHeader(s string) (Header, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return Header{}, fmt.Errorf("%q: want KEY=VALUE", s)
	}
	return Header{k, v}, nil
}

// Search filters messages by what they carry, within a time bound; the
// zero Search does not filter.
type Search struct {
	Headers []Header // every one of them
	Payload string   // in a payload that is UTF-8 text, as bytes (case counts)
	// Since bounds the search to the messages enqueued within it; 0 is
	// DefaultSince when there are Headers or a Payload, else no bound.
	Since time.Duration

	from   int64 // the window's first id, once resolved (see resolve)
	lo, hi int64 // the slice of the window read, [lo, hi), when not 0 (see browseSearch)
}

// searches reports whether s reads the messages' headers or payloads.
func (s *Search) searches() bool { return len(s.Headers) > 0 || s.Payload != "" }

// Searches reports whether s reads the messages' headers or payloads.
func (s Search) Searches() bool { return s.searches() }

// since is s's time bound, 0 for none.
func (s *Search) since() time.Duration {
	if s.Since == 0 && s.searches() {
		return DefaultSince
	}
	return s.Since
}

// fromIDSQL is the first message id of the window of the messages
// enqueued within $1: a bisection of the ids along message_pkey (one
// probe of each range a step, about 40 steps for 10⁹ ids), which takes
// created_at to grow with the id. It does, but for transactions that
// enqueue across the bound: those messages fall on either side of it.
// Past the newest message when none is that recent.
const fromIDSQL = `
WITH RECURSIVE b(lo, hi) AS (
    SELECT coalesce(min(id), 1), coalesce(max(id), 0) + 1 FROM pepsi.message
  UNION ALL
    SELECT CASE WHEN f.id IS NULL OR f.created_at >= now() - $1::interval THEN b.lo ELSE f.id + 1 END,
           CASE WHEN f.id IS NULL OR f.created_at >= now() - $1::interval THEN (b.lo + b.hi) / 2 ELSE b.hi END
      FROM b LEFT JOIN LATERAL (SELECT m.id, m.created_at FROM pepsi.message m
                                 WHERE m.id >= (b.lo + b.hi) / 2 AND m.id < b.hi
                                 ORDER BY m.id LIMIT 1) f ON true
     WHERE b.lo < b.hi
)
SELECT hi FROM b WHERE lo >= hi`

// resolve finds the first id of s's window, once.
func (db *DB) resolve(ctx context.Context, s *Search) error {
	d := s.since()
	if d < 0 {
		return fmt.Errorf("since %v: want a positive duration", d)
	}
	if d == 0 || s.from > 0 {
		return nil
	}
	return db.read(ctx, s, func(q querier) error { return q.QueryRow(ctx, fromIDSQL, d).Scan(&s.from) })
}

// FromID returns the first id of the window of s (messages enqueued
// within its time bound), 0 when it has none.
func (db *DB) FromID(ctx context.Context, s Search) (int64, error) {
	err := db.resolve(ctx, &s)
	return s.from, err
}

// textPayloadRE matches encode(payload, 'escape') of a payload that is
// UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
// U+10FFFF) without a NUL byte, which PostgreSQL text cannot hold: the
// encoding leaves the bytes 01 to 7F as they are but for the backslash,
// doubled, and writes 00 and 80 to FF as \ooo (C below, a continuation
// byte, is \200 to \277). PostgreSQL has no test of UTF-8 that does not
// raise an error, and a function of ours that caught it would cost a
// subtransaction a row.
var textPayloadRE = strings.ReplaceAll(`^(?:[^\\]|\\\\`+
	`|\\3(?:0[2-7]|[12][0-7]|3[0-7])C`+ // C2-DF
	`|\\340\\2[4-7][0-7]C|\\3(?:4[1-7]|5[0-4])CC|\\355\\2[0-3][0-7]C|\\35[67]CC`+ // E0, E1-EC, ED, EE-EF
	`|\\360\\2[2-7][0-7]CC|\\36[1-3]CCC|\\364\\2[01][0-7]CC`+ // F0, F1-F3, F4
	`)*$`, "C", `\\2[0-7][0-7]`)

// messageConds returns the conditions of s on the message row m, adding
// their arguments with arg.
func (s *Search) messageConds(arg func(any) string) []string {
	var where []string
	for _, h := range s.Headers {
		where = append(where, "m.headers ->> "+arg(h.Key)+" = "+arg(h.Value))
	}
	if s.Payload != "" {
		// The bytes first, a cheap test that most payloads fail; the
		// text test only on those that have them: ASCII without a NUL
		// (no backslash in the encoding: a memchr), else the regular
		// expression, 0.5 µs a payload of 50 bytes.
		enc := "encode(m.payload, 'escape')"
		where = append(where, "CASE WHEN position("+arg([]byte(s.Payload))+"::bytea IN m.payload) > 0 THEN strpos("+enc+", '\\') = 0 OR "+enc+" ~ "+
			arg(textPayloadRE)+" ELSE false END")
	}
	return where
}

// conds returns the conditions of s on pepsi.state (named state): its
// window, and the message row's conditions as a semi-join on message_pkey.
func (s *Search) conds(arg func(any) string) []string {
	var where, bounds []string
	if s.from > 0 {
		bounds = append(bounds, "id >= "+arg(s.from))
	}
	if s.lo > 0 {
		bounds = append(bounds, "id >= "+arg(s.lo))
	}
	if s.hi > 0 {
		bounds = append(bounds, "id < "+arg(s.hi))
	}
	where = append(where, bounds...)
	if mc := s.messageConds(arg); len(mc) > 0 {
		// The bounds repeated on m: the planner does not carry a range
		// across the join, and message's ranges are pruned by it.
		for i := len(bounds) - 1; i >= 0; i-- {
			mc = append([]string{"m." + bounds[i]}, mc...)
		}
		where = append(where, "EXISTS (SELECT FROM pepsi.message m WHERE m.id = state.id AND "+strings.Join(mc, " AND ")+")")
	}
	return where
}

// querier is what a statement runs on: the pool, or a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// read runs fn on the pool, or, for a search, in a transaction whose
// statements stop after SearchTimeout (ErrSearchTimeout).
func (db *DB) read(ctx context.Context, s *Search, fn func(querier) error) error {
	if !s.searches() {
		return fn(db.pool)
	}
	return searchErr(ctx, db.inTx(ctx, func(tx pgx.Tx) error {
		if err := limitSearch(ctx, tx, s); err != nil {
			return err
		}
		return fn(tx)
	}))
}

// limitSearch stops tx's later statements after SearchTimeout when s
// searches.
func limitSearch(ctx context.Context, tx pgx.Tx, s *Search) error {
	if !s.searches() {
		return nil
	}
	_, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(SearchTimeout.Milliseconds(), 10))
	return err
}

// searchErr turns a statement stopped by statement_timeout into
// ErrSearchTimeout, saying how to narrow the search.
func searchErr(ctx context.Context, err error) error {
	var pg *pgconn.PgError
	if err != nil && ctx.Err() == nil && errors.As(err, &pg) && pg.Code == "57014" {
		return fmt.Errorf("%w (%v): narrow it: a shorter time bound, a stage or a status", ErrSearchTimeout, SearchTimeout)
	}
	return err
}
