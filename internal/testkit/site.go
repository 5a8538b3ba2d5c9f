package testkit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Site is a test database and a pepsi.conf for a dispatcher on it: what the
// dispatcher tests' bundle, workertest.Pipeline, the metrics test and the
// app's fault tests have in common. How the dispatcher runs (in this
// process or as the binary) is theirs.
type Site struct {
	T    testing.TB
	DB   *pgtest.DB // the product's pool on it, and Pool for the test's own SQL
	DSN  string
	Path string  // the pepsi.conf
	Logs *Buffer // for what runs in the test's process: a dispatcher, and its workers' stderr
}

// NewSite creates a migrated database, dropped when t ends, and writes a
// pepsi.conf: its DSN in [database], then conf (the [pepsi-dispatch] and
// [stage-NAME] sections). Each of database, given the DSN, returns more
// [database] keys ("WORKER_DSN = …\n").
func NewSite(t testing.TB, conf string, database ...func(dsn string) string) *Site {
	t.Helper()
	db, dsn := pgtest.New(t)
	keys := ""
	for _, f := range database {
		keys += f(dsn)
	}
	path := filepath.Join(t.TempDir(), "pepsi.conf")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("[database]\nDSN = %s\n%s\n%s", dsn, keys, conf)), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Site{T: t, DB: db, DSN: dsn, Path: path, Logs: &Buffer{}}
}

// WorkerTables creates the tables the test worker (see Worker) records its
// passes and starts in: test_passes and test_workers.
func (s *Site) WorkerTables() {
	s.T.Helper()
	createWorkerTables(s.T, s.DB.Pool)
}

// Enqueue puts one message per payload at stage, in one statement, and
// returns their ids.
func (s *Site) Enqueue(stage string, payloads ...[]byte) []int64 {
	s.T.Helper()
	ids, err := s.DB.EnqueueBulk(context.Background(), queue.Bulk{Stage: stage, Payloads: payloads})
	if err != nil {
		s.T.Fatalf("enqueue at %s: %v", stage, err)
	}
	return ids
}

// Int64 runs a query that returns one number.
func (s *Site) Int64(sql string, args ...any) int64 {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var n int64
	if err := s.DB.Pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		s.T.Fatalf("%s: %v; %s", sql, err, queueRows{s})
	}
	return n
}

// IDs runs a query that returns one number a row (message ids, pids).
func (s *Site) IDs(sql string, args ...any) []int64 {
	s.T.Helper()
	rows, err := s.DB.Pool.Query(context.Background(), sql, args...)
	if err != nil {
		s.T.Fatalf("%s: %v", sql, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		s.T.Fatalf("%s: %v", sql, err)
	}
	return ids
}

// Count is how many messages are in status.
func (s *Site) Count(status string) int64 {
	s.T.Helper()
	return s.Int64("SELECT count(*) FROM pepsi.state WHERE status = $1", status)
}

// queryTimeout bounds a query of a test's: one that waits longer than
// this for a lock fails the test, naming the query, instead of stalling
// the Wait that polls it past its deadline.
const queryTimeout = 30 * time.Second

// WaitFor is Wait showing the site's log and logs, and the queue's rows by
// stage, status and partition.
func (s *Site) WaitFor(what string, timeout time.Duration, cond func() bool, logs ...fmt.Stringer) {
	s.T.Helper()
	Wait(s.T, what, timeout, cond, append([]fmt.Stringer{s.Logs, queueRows{s}}, logs...)...)
}

// queueRows describes the queue for a failure message.
type queueRows struct{ s *Site }

func (q queueRows) String() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := q.s.DB.Pool.Query(ctx, `SELECT stage, status, tableoid::regclass::text, count(*)
		FROM pepsi.state GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
	if err != nil {
		return "the queue's rows: " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	b.WriteString("the queue's rows:")
	for rows.Next() {
		var stage, status, part string
		var n int64
		if err := rows.Scan(&stage, &status, &part, &n); err != nil {
			return b.String() + " " + err.Error()
		}
		fmt.Fprintf(&b, " %s/%s %d (%s);", stage, status, n, part)
	}
	if err := rows.Err(); err != nil {
		b.WriteString(" " + err.Error())
	}
	q.waiting(ctx, &b)
	return b.String()
}

// waiting appends the sessions of the test's database that wait on a
// lock: a Wait that times out behind one names it.
func (q queueRows) waiting(ctx context.Context, b *strings.Builder) {
	rows, err := q.s.DB.Pool.Query(ctx, `SELECT pid, coalesce(application_name, ''),
		left(query, 120), (now() - xact_start)::text
		FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var pid int32
		var app, query, age string
		if rows.Scan(&pid, &app, &query, &age) == nil {
			fmt.Fprintf(b, "\nwaiting on a lock: pid %d (%s), in transaction for %s: %s", pid, app, age, query)
		}
	}
}

// UnsettledSQL counts the messages not yet finished: in pepsi.state,
// or enqueued by pepsi.enqueue() and not admitted yet.
const UnsettledSQL = `SELECT (SELECT count(*) FROM pepsi.state WHERE status NOT IN ('done', 'failed', 'cancelled'))
     + (SELECT count(*) FROM pepsi.ingress)`

// WaitSettled waits until every message is done, failed or cancelled.
func (s *Site) WaitSettled(timeout time.Duration, logs ...fmt.Stringer) {
	s.T.Helper()
	s.WaitFor("every message done, failed or cancelled", timeout, func() bool {
		return s.Int64(UnsettledSQL) == 0
	}, logs...)
}

// Check is CheckInvariants on the site's database.
func (s *Site) Check(checks ...Check) bool {
	s.T.Helper()
	return CheckInvariants(s.T, s.DB, checks...)
}
