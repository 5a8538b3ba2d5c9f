package queue_test

import (
	"context"
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
		{"no such role", withUser(pgadmin.WithDatabase(server, "postgres"), "pepsi_no_such_role"), false},
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

// withUser returns dsn (a URL or key=value string) with user set.
func withUser(dsn, user string) string {
	switch {
	case !strings.Contains(dsn, "://"):
		return dsn + " user=" + user
	case strings.Contains(dsn, "?"):
		return dsn + "&user=" + user
	}
	return dsn + "?user=" + user
}
