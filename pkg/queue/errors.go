package queue

import (
	"context"
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
)

// What an error from the store means for its caller. What PostgreSQL's
// codes mean is pkg/pgerr's; the judgements here add the store's own
// errors (errRecovery) to them.

// describe shortens a connection error to its cause, keeping the
// *pgconn.ConnectError in the chain for IsConnectFailure.
func describe(err error) error {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return &connectError{ce}
	}
	return err
}

type connectError struct{ ce *pgconn.ConnectError }

func (e *connectError) Error() string { return e.ce.Unwrap().Error() }
func (e *connectError) Unwrap() error { return e.ce }

// SQLState is pgerr.SQLState.
func SQLState(err error) (string, bool) { return pgerr.SQLState(err) }

// IsConnectFailure is pgerr.IsConnectFailure.
func IsConnectFailure(err error) bool { return pgerr.IsConnectFailure(err) }

// IsServerShutdown is pgerr.IsServerShutdown.
func IsServerShutdown(err error) bool { return pgerr.IsServerShutdown(err) }

// IsReadOnly reports whether err says the server is a read-only standby.
func IsReadOnly(err error) bool {
	code, _ := pgerr.SQLState(err)
	return errors.Is(err, errRecovery) || code == pgerrcode.ReadOnlySQLTransaction
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
