package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestRetryTransient: serialization failures and deadlocks are re-run,
// other errors are not.
func TestRetryTransient(t *testing.T) {
	for _, tc := range []struct {
		code  string
		calls int
		ok    bool
	}{
		{pgerrcode.SerializationFailure, 3, true},
		{pgerrcode.DeadlockDetected, 3, true},
		{pgerrcode.UniqueViolation, 1, false},
	} {
		calls := 0
		err := Retry(context.Background(), func() error {
			calls++
			if calls < 3 {
				return &pgconn.PgError{Code: tc.code}
			}
			return nil
		})
		if calls != tc.calls || (err == nil) != tc.ok {
			t.Errorf("%s: %d calls, err %v; want %d calls, ok %v", tc.code, calls, err, tc.calls, tc.ok)
		}
	}
	calls := 0
	err := Retry(context.Background(), func() error { calls++; return &pgconn.PgError{Code: pgerrcode.SerializationFailure} })
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || calls != 5 {
		t.Errorf("always failing: %d calls, err %v; want 5 calls and the error", calls, err)
	}
}
