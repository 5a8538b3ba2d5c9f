package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// countTimeout bounds the statements of one scrape.
const countTimeout = 10 * time.Second

// DefaultMaxAge is how long a count of the queue (and, for Stats, a read
// of the statistics) is reused by later scrapes.
const DefaultMaxAge = 5 * time.Second

// Source is the database the metrics read, connected on first use (so that
// a server that is down when the process starts does not stop it) with one
// connection (NewPoolSource: more), and again on the next scrape after a
// failure to connect. Its sessions run with the server's JIT compilation
// off (queue.Options.NoJIT): the exporter's and the dashboard's
// statements are short, and on tables without statistics the planner's
// cost passes jit_above_cost, so that compiling one took a second where
// running it took a millisecond (issue 54).
type Source struct {
	dsn   string
	name  string
	conns int32

	mu sync.Mutex
	db *admin.DB
}

// NewSource returns a Source for dsn whose session is named after name
// ("pepsi httpd" → application_name "pepsi httpd pid N on HOST").
func NewSource(dsn, name string) *Source { return NewPoolSource(dsn, name, 1) }

// NewPoolSource is NewSource with up to conns connections, for a server
// whose requests should not wait for each other (pepsi httpd's dashboard).
func NewPoolSource(dsn, name string, conns int32) *Source {
	return &Source{dsn: dsn, name: name, conns: conns}
}

// SourceOf returns a Source over a pool the caller has opened (and closes).
func SourceOf(db *admin.DB) *Source { return &Source{db: db} }

// DB returns the connection pool, connecting it if need be.
func (s *Source) DB(ctx context.Context) (*admin.DB, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db != nil {
		return s.db, nil
	}
	db, err := admin.Open(ctx, s.dsn, queue.Options{App: s.name, MaxConns: s.conns, NoJIT: true})
	if err != nil {
		return nil, err
	}
	s.db = db
	return db, nil
}

// Ping checks that the database answers.
func (s *Source) Ping(ctx context.Context) error {
	db, err := s.DB(ctx)
	if err != nil {
		return err
	}
	return db.Ping(ctx)
}

// Close closes the connection, if any.
func (s *Source) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
}

// episode logs a failure that repeats once, when it starts, and once more
// when it ends, not on every scrape.
type episode struct {
	log  *slog.Logger
	what string

	mu      sync.Mutex
	failing bool
}

func (e *episode) failed(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.failing {
		e.failing = true
		e.log.Warn("metrics: "+e.what+" failed; retrying on later scrapes", "err", err)
	}
}

func (e *episode) ok() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failing {
		e.failing = false
		e.log.Info("metrics: " + e.what + " works again")
	}
}

// cache runs a read at most once per maxAge, whoever asks; concurrent
// callers wait for one read. Failures are not kept.
type cache[T any] struct {
	maxAge time.Duration
	read   func(context.Context) (T, error)

	mu   sync.Mutex
	at   time.Time
	have bool
	val  T
}

func (c *cache[T]) get(ctx context.Context) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.have && time.Since(c.at) < c.maxAge {
		return c.val, nil
	}
	v, err := c.read(ctx)
	if err != nil {
		c.have = false
		return v, err
	}
	c.val, c.at, c.have = v, time.Now(), true
	return v, nil
}
