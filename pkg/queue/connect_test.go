package queue_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/pgadmin"
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
		if got := queue.IsConnectFailure(err); got != tc.retry {
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
	for _, tc := range []struct{ dsn, app, want string }{
		{dsn, "pepsi queue ls", fmt.Sprintf("pepsi queue ls pid %d on %s", os.Getpid(), host)},
		{withParam(dsn, "application_name", "mine"), "pepsi queue ls", "mine"},
		{dsn, "", ""},
	} {
		db, err := queue.Open(ctx, tc.dsn, queue.Options{App: tc.app, MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = db.Pool.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&got)
		db.Close()
		if err != nil || got != tc.want {
			t.Errorf("Open(%q, App %q): application_name %q, %v; want %q", tc.dsn, tc.app, got, err, tc.want)
		}
	}
}
