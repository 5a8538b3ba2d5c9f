package queue

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
)

// What an error from the store means for its caller. What PostgreSQL's
// codes mean is pkg/pgerr's; the judgements here add the store's own
// errors (errRecovery) to them.

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
	if code, _ := pgerr.SQLState(e.ce); code == pgerrcode.InvalidCatalogName && e.ce.Config != nil {
		msg += "; create it: createdb " + e.ce.Config.Database
	}
	return msg
}
func (e *connectError) Unwrap() error { return e.ce }

// IsDataError reports whether err says the server refused a statement for
// the values it was given, which it will refuse again however often it is
// retried: a data exception (SQLSTATE class 22, such as 22P05 for a NUL in
// jsonb), an integrity constraint (class 23) but a unique violation, which
// a racing insert may cause, or a program limit (class 54, a value too
// large).
func IsDataError(err error) bool {
	code, ok := pgerr.SQLState(err)
	if !ok || code == pgerrcode.UniqueViolation {
		return false
	}
	return pgerrcode.IsDataException(code) || pgerrcode.IsIntegrityConstraintViolation(code) || pgerrcode.IsProgramLimitExceeded(code)
}

// IsReadOnly reports whether err says the server is a read-only standby.
func IsReadOnly(err error) bool {
	code, _ := pgerr.SQLState(err)
	return errors.Is(err, errRecovery) || code == pgerrcode.ReadOnlySQLTransaction
}

// MayNotWrite reports whether err is the server refusing this session a
// write: a read-only transaction or standby (IsReadOnly), or a role
// without the privilege (42501).
func MayNotWrite(err error) bool {
	code, _ := pgerr.SQLState(err)
	return IsReadOnly(err) || code == pgerrcode.InsufficientPrivilege
}

// IsOutage reports whether err says the database could not be reached or
// used at all (a failed connect, a broken connection, a server shutting
// down or read-only), as opposed to a statement the server refused.
func IsOutage(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if pgerr.IsConnectFailure(err) || pgerr.IsServerShutdown(err) || IsReadOnly(err) {
		return true
	}
	_, ok := pgerr.SQLState(err)
	return !ok // no SQLSTATE: the connection, not the statement, failed
}
