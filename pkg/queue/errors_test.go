package queue_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestIsReadOnly: a read-only standby is told by its SQLSTATE or by
// Listener.Ping's ErrRecovery, bare or wrapped, and by nothing else.
func TestIsReadOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: pgerrcode.ReadOnlySQLTransaction}, true},
		{fmt.Errorf("context: %w", &pgconn.PgError{Code: pgerrcode.ReadOnlySQLTransaction}), true},
		{fmt.Errorf("ping: %w", queue.ErrRecovery), true},
		{&pgconn.PgError{Code: pgerrcode.AdminShutdown}, false},
		{errors.New(pgerrcode.ReadOnlySQLTransaction), false},
		{nil, false},
	} {
		if got := queue.IsReadOnly(tc.err); got != tc.want {
			t.Errorf("IsReadOnly(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
