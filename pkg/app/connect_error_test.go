package app

import (
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestConnectRefusedOneLine: a server that refuses the connection is
// reported on one line, its dial error once (pgconn tries a host twice
// under sslmode=prefer), by doctor and by the other commands.
func TestConnectRefusedOneLine(t *testing.T) {
	env(t, "postgres://postgres@127.0.0.1:1/x?connect_timeout=5", "")
	r := pepsi(t, "", "doctor")
	r.wantCode(t, 1)
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "FAIL  database: cannot connect: ") {
		t.Errorf("doctor printed %d lines, want one FAIL line:\n%s", len(lines), r.stdout)
	}
	if n := strings.Count(r.stdout, "connection refused"); n != 1 {
		t.Errorf("doctor names the dial error %d times, want once:\n%s", n, r.stdout)
	}
	for _, args := range [][]string{{"queue"}, {"migrate"}} {
		r = pepsi(t, "", args...)
		r.wantCode(t, 1)
		r.wantOneError(t, "connection refused")
		if n := strings.Count(r.stderr, "connection refused"); n != 1 {
			t.Errorf("%q names the dial error %d times, want once: %s", args, n, r.stderr)
		}
	}
}

// TestConnectNoDatabase: a database that does not exist is reported on
// one line that says how to create it.
func TestConnectNoDatabase(t *testing.T) {
	dsn := pgadmin.WithDatabase(pgtest.ServerDSN(), "pepsi_test_no_such_database")
	env(t, dsn, "")
	for _, args := range [][]string{{"migrate"}, {"queue"}} {
		r := pepsi(t, "", args...)
		r.wantCode(t, 1)
		r.wantOneError(t, `database "pepsi_test_no_such_database" does not exist`)
		if !strings.Contains(r.stderr, "createdb pepsi_test_no_such_database") {
			t.Errorf("%q: no createdb hint: %s", args, r.stderr)
		}
	}
	r := pepsi(t, "", "doctor")
	r.wantCode(t, 1)
	if !strings.Contains(r.stdout, "createdb pepsi_test_no_such_database") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("doctor:\n%s", r.stdout)
	}
}
