package queue_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestIsConnectFailure: a server that cannot be reached is worth retrying;
// a refused login or a missing database is not.
func TestIsConnectFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server := pgtest.ServerDSN()
	for _, tc := range []struct {
		name, dsn string
		retry     bool
	}{
		{"no server", "host=/nonexistent-pepsi-socket-dir dbname=x", true},
		{"no such role", withParam(pgadmin.WithDatabase(server, "postgres"), "user", "pepsi_no_such_role"), false},
		{"no such database", pgadmin.WithDatabase(server, "pepsi_no_such_database"), false},
	} {
		_, err := queue.Dial(ctx, tc.dsn, "pepsi_ingress")
		if err == nil {
			t.Errorf("%s: connected", tc.name)
			continue
		}
		if got := pgerr.IsConnectFailure(err); got != tc.retry {
			t.Errorf("%s: IsConnectFailure(%v) = %v, want %v", tc.name, err, got, tc.retry)
		}
	}
}

// withParam returns dsn (a URL or key=value string) with key set to value.
func withParam(dsn, key, value string) string {
	switch {
	case !strings.Contains(dsn, "://"):
		return dsn + " " + key + "=" + value
	case strings.Contains(dsn, "?"):
		return dsn + "&" + key + "=" + value
	}
	return dsn + "?" + key + "=" + value
}

// TestOpenNames: Open names the sessions after Options.App, unless the DSN
// names them.
func TestOpenNames(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	host, _ := os.Hostname()
	conn := connect(t, dsn)
	for _, tc := range []struct{ dsn, app, want string }{
		{dsn, "pepsi queue ls", fmt.Sprintf("pepsi queue ls pid %d on %s", os.Getpid(), host)},
		{withParam(dsn, "application_name", "mine"), "pepsi queue ls", "mine"},
		{dsn, "", ""},
	} {
		db, err := queue.Open(ctx, tc.dsn, queue.Options{App: tc.app, MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		// Open's check left its session idle: the newest but this
		// unnamed one (those of the cases before may linger a moment).
		var got string
		err = conn.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
			ORDER BY backend_start DESC LIMIT 1`).Scan(&got)
		db.Close()
		if err != nil || got != tc.want {
			t.Errorf("Open(%q, App %q): application_name %q, %v; want %q", tc.dsn, tc.app, got, err, tc.want)
		}
	}
}

// TestOpenNoJIT: a pool opened with NoJIT (the dispatcher's) runs without
// JIT compilation in every session, whatever the server's jit; one opened
// without it keeps the server's.
func TestOpenNoJIT(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		dsn   string
		nojit bool
		want  string
	}{
		{withParam(dsn, "jit", "on"), true, "off"},
		{withParam(dsn, "jit", "on"), false, "on"},
	} {
		db, err := queue.Open(ctx, tc.dsn, queue.Options{App: "pepsi test", MaxConns: 2, NoJIT: tc.nojit})
		if err != nil {
			t.Fatal(err)
		}
		got, err := db.ShowForTest(ctx, "jit")
		db.Close()
		if err != nil || got != tc.want {
			t.Errorf("Open(NoJIT %v) on a server with jit on: jit = %q, %v; want %q", tc.nojit, got, err, tc.want)
		}
	}
}
