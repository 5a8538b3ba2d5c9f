package queue

import "context"

// Test-only access to unexported parts for the external test package
// (queue_test), which needs pkg/pgtest and so cannot live in package queue.

// ClaimSQL is the claim statement, for plan tests and benchmarks.
const ClaimSQL = claimSQL

// LoadMigrations reads migrations from fsys.
var LoadMigrations = loadMigrations

// ExecForTest runs sql on the listener's own session.
func (l *Listener) ExecForTest(ctx context.Context, sql string, args ...any) error {
	_, err := l.conn.Exec(ctx, sql, args...)
	return err
}

// SettleSQL is the settle statement, for plan tests.
const SettleSQL = settleSQL

// SettleArgs returns SettleSQL's arguments for vs.
var SettleArgs = settleArgs
