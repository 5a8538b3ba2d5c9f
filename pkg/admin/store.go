package admin

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// What the operator's commands, the dashboard and /metrics read through
// the dispatcher's store: each is the store's own statement, named here so
// that admin.DB says all it offers.

// CheckSchema returns an error unless the database is migrated to exactly
// the version this binary knows.
func (db *DB) CheckSchema(ctx context.Context) error { return db.q.CheckSchema(ctx) }

// Admit moves the messages waiting in pepsi.ingress to pending, as a
// dispatcher does, so that a read of pepsi.state sees every message
// enqueued before it; it returns how many it moved.
func (db *DB) Admit(ctx context.Context) (int64, error) { return db.q.Admit(ctx) }

// ReadStats returns every stage's totals (by name) and the global totals.
func (db *DB) ReadStats(ctx context.Context) ([]queue.StageStats, queue.DispatchStats, error) {
	return db.q.ReadStats(ctx)
}

// LockHolder returns the session of a running dispatcher, or nil when
// none runs.
func (db *DB) LockHolder(ctx context.Context) (*queue.LockHolder, error) {
	return db.q.LockHolder(ctx)
}

// FlowKeys returns every keyed stage pepsi.flow_keys names, by stage.
func (db *DB) FlowKeys(ctx context.Context) ([]queue.FlowKey, error) { return db.q.FlowKeys(ctx) }

// Schedules reads pepsi.schedule, by name.
func (db *DB) Schedules(ctx context.Context) ([]queue.ScheduleRun, error) {
	return db.q.Schedules(ctx)
}

// Enqueued counts the messages waiting in pepsi.ingress per stage:
// enqueued, not yet admitted.
func (db *DB) Enqueued(ctx context.Context) (map[string]int64, error) { return db.q.Enqueued(ctx) }

// NotRunStages returns the stages whose recent answers were mostly 75, by
// name: the one judgement pepsi doctor and the dashboard warn of.
func (db *DB) NotRunStages(ctx context.Context, statsInterval time.Duration) ([]queue.NotRunAnswers, error) {
	return db.q.NotRunStages(ctx, statsInterval)
}
