package queue

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// What an error from the database means for its caller: every SQLSTATE
// pepsi acts on is named here, and the other packages ask these functions
// instead of comparing codes.

// DescribeConnect shortens a connection error to its cause, on one line,
// keeping the *pgconn.ConnectError in the chain for IsConnectFailure.
func DescribeConnect(err error) error {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return &connectError{ce}
	}
	return err
}

type connectError struct{ ce *pgconn.ConnectError }

// Error gives each attempt's error once, on one line: pgconn puts one
// attempt a line, and tries a host twice under sslmode=prefer (with TLS,
// then without). A missing database is told how to be created.
func (e *connectError) Error() string {
	var causes []string
	for _, l := range strings.Split(e.ce.Unwrap().Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(causes, l) {
			causes = append(causes, l)
		}
	}
	msg := strings.Join(causes, "; ")
	if code, _ := SQLState(e.ce); code == pgerrcode.InvalidCatalogName && e.ce.Config != nil {
		msg += "; create it: createdb " + e.ce.Config.Database
	}
	return msg
}
func (e *connectError) Unwrap() error { return e.ce }

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

// IsDataError reports whether err says the server refused a statement for
// the values it was given, which it will refuse again however often it is
// retried: a data exception (SQLSTATE class 22, such as 22P05 for a NUL in
// jsonb), an integrity constraint (class 23) but a unique violation, which
// a racing insert may cause, or a program limit (class 54, a value too
// large).
func IsDataError(err error) bool {
	code, ok := SQLState(err)
	if !ok || code == pgerrcode.UniqueViolation {
		return false
	}
	return pgerrcode.IsDataException(code) || pgerrcode.IsIntegrityConstraintViolation(code) || pgerrcode.IsProgramLimitExceeded(code)
}

// IsReadOnly reports whether err says the server is a read-only standby.
func IsReadOnly(err error) bool {
	code, _ := SQLState(err)
	return errors.Is(err, errRecovery) || code == pgerrcode.ReadOnlySQLTransaction
}

// MayNotWrite reports whether err is the server refusing this session a
// write: a read-only transaction or standby (IsReadOnly), or a role
// without the privilege (42501).
func MayNotWrite(err error) bool {
	code, _ := SQLState(err)
	return IsReadOnly(err) || code == pgerrcode.InsufficientPrivilege
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

// IsOutage reports whether err says the database could not be reached or
// used at all (a failed connect, a broken connection, a server shutting
// down or read-only), as opposed to a statement the server refused.
func IsOutage(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if IsConnectFailure(err) || IsServerShutdown(err) || IsReadOnly(err) {
		return true
	}
	_, ok := SQLState(err)
	return !ok // no SQLSTATE: the connection, not the statement, failed
}
