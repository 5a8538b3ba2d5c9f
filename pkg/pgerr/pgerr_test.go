package pgerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
)

// codes are SQLSTATEs the classifiers are tried on: each one's own and
// others that must not match.
var codes = []string{"", pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.ReadOnlySQLTransaction,
	pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
	pgerrcode.ObjectNotInPrerequisiteState, pgerrcode.UniqueViolation, pgerrcode.QueryCanceled}

// TestClassify: each classifier says yes to its SQLSTATEs, bare or
// wrapped, and no to the others and to errors that carry none.
func TestClassify(t *testing.T) {
	t.Parallel()
	classify(t, "IsTransient", pgerr.IsTransient, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected)
	classify(t, "IsServerShutdown", pgerr.IsServerShutdown, pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow)
	if code, ok := pgerr.SQLState(fmt.Errorf("x: %w", &pgconn.PgError{Code: pgerrcode.UniqueViolation})); !ok || code != pgerrcode.UniqueViolation {
		t.Errorf("SQLState = %q, %v", code, ok)
	}
	if code, ok := pgerr.SQLState(errors.New(pgerrcode.UniqueViolation)); ok || code != "" {
		t.Errorf("SQLState of a plain error = %q, %v", code, ok)
	}
	if pgerr.IsConnectFailure(&pgconn.PgError{Code: pgerrcode.ConnectionFailure}) {
		t.Error("IsConnectFailure true for a server error that is no failed connect")
	}
}

// classify checks that fn, named name, says yes to the SQLSTATEs yes
// among codes, bare or wrapped, and no to the others and to errors that
// carry none.
func classify(t *testing.T, name string, fn func(error) bool, yes ...string) {
	t.Helper()
	for _, code := range codes {
		want := false
		for _, y := range yes {
			want = want || code == y
		}
		err := error(&pgconn.PgError{Code: code})
		if got := fn(err); got != want {
			t.Errorf("%s(%q) = %v, want %v", name, code, got, want)
		}
		if got := fn(fmt.Errorf("context: %w", err)); got != want {
			t.Errorf("%s(wrapped %q) = %v, want %v", name, code, got, want)
		}
	}
	if fn(nil) || fn(errors.New(yes[0])) {
		t.Errorf("%s true for an error without a SQLSTATE", name)
	}
}
