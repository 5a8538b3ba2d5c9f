// Package pgerr says what an error from PostgreSQL means for its caller:
// the SQLSTATEs pepsi acts on, for the dispatcher's store (pkg/queue) and
// for stage programs (pkg/worker) alike, so that neither compares codes.
package pgerr

import (
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLState returns the SQLSTATE of the server error in err's chain, and
// false when err holds none.
func SQLState(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, true
	}
	return "", false
}

// IsConnectFailure reports whether err is a failure to reach the server,
// which may go away when retried. A refused login (SQLSTATE class 28) or a
// missing database (3D000) is not: retrying will not mend it.
func IsConnectFailure(err error) bool {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return false
	}
	code, _ := SQLState(err)
	return !pgerrcode.IsInvalidAuthorizationSpecification(code) && code != pgerrcode.InvalidCatalogName
}

// IsTransient reports whether err is a serialization failure or deadlock
// that is worth re-running.
func IsTransient(err error) bool {
	code, _ := SQLState(err)
	return code == pgerrcode.SerializationFailure || code == pgerrcode.DeadlockDetected
}

// IsServerShutdown reports whether err says the server is shutting down,
// has crashed or does not take connections yet.
func IsServerShutdown(err error) bool {
	switch code, _ := SQLState(err); code {
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow:
		return true
	}
	return false
}
