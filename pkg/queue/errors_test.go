package queue_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestClassify: each classifier says yes to its SQLSTATEs, bare or
// wrapped, and no to the others and to errors that carry none.
func TestClassify(t *testing.T) {
	t.Parallel()
	classifiers := []struct {
		name string
		fn   func(error) bool
		yes  []string
	}{
		{"IsTransient", queue.IsTransient, []string{pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected}},
		{"IsReadOnly", queue.IsReadOnly, []string{pgerrcode.ReadOnlySQLTransaction}},
		{"IsServerShutdown", queue.IsServerShutdown, []string{pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow}},
	}
	codes := []string{"", pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.ReadOnlySQLTransaction,
		pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
		pgerrcode.ObjectNotInPrerequisiteState, pgerrcode.UniqueViolation, pgerrcode.QueryCanceled}
	for _, c := range classifiers {
		for _, code := range codes {
			want := false
			for _, y := range c.yes {
				want = want || code == y
			}
			err := error(&pgconn.PgError{Code: code})
			if got := c.fn(err); got != want {
				t.Errorf("%s(%q) = %v, want %v", c.name, code, got, want)
			}
			if got := c.fn(fmt.Errorf("context: %w", err)); got != want {
				t.Errorf("%s(wrapped %q) = %v, want %v", c.name, code, got, want)
			}
		}
		if c.fn(nil) || c.fn(errors.New(c.yes[0])) {
			t.Errorf("%s true for an error without a SQLSTATE", c.name)
		}
	}
	if !queue.IsReadOnly(fmt.Errorf("ping: %w", queue.ErrRecovery)) {
		t.Error("IsReadOnly false for ErrRecovery")
	}
	if code, ok := queue.SQLState(fmt.Errorf("x: %w", &pgconn.PgError{Code: pgerrcode.UniqueViolation})); !ok || code != pgerrcode.UniqueViolation {
		t.Errorf("SQLState = %q, %v", code, ok)
	}
	if code, ok := queue.SQLState(errors.New(pgerrcode.UniqueViolation)); ok || code != "" {
		t.Errorf("SQLState of a plain error = %q, %v", code, ok)
	}
}
