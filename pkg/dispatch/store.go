package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The database as the dispatcher uses it. pkg/queue's *DB and *Listener
// implement these interfaces; the loop holds neither (nosession_test.go),
// only the goroutines that run statements do. Each part names what one
// goroutine needs, one method per statement, except RunTurn: a turn is the
// hot path, one batch in one transaction (see docs/design.md, "Claim and
// settle").

// Store is the dispatcher's pool of queue connections.
type Store interface {
	startStore
	turnStore
	choreStore
	retentionStore
	vacuumStore
	scheduleStore
	joinStore
	Close()
}

// startStore is what the dispatcher runs before its loop begins.
type startStore interface {
	CheckSchema(ctx context.Context) error
	SetFence(token int64, stages []string)
	SetFlowKeys(ctx context.Context, stages []string, keys []queue.FlowKey) (changed []string, rows int64, err error)
	ResetRunning(ctx context.Context, stages ...string) (int64, error)
	NewPassTokens(ctx context.Context) (queue.PassTokens, error)
}

// resetter drops the pool's connections, so that the next ones find the
// new primary after a failover.
type resetter interface {
	Reset()
}

// turnStore is what the claim and settle lanes run.
type turnStore interface {
	resetter
	RunTurn(ctx context.Context, t queue.Turn, res *queue.TurnResult) error
}

// choreStore is what the chore lane runs.
type choreStore interface {
	resetter
	ResetOrphans(ctx context.Context, held []int64, olderThan time.Duration, stages ...string) (int64, error)
	AddStatsOnce(ctx context.Context, flushes []queue.StatsFlush) error
	SetArmed(ctx context.Context, set string, on bool) error
}

// retentionStore is what the retention service runs.
type retentionStore interface {
	resetter
	DoneAhead(ctx context.Context, width time.Duration, ahead int) (int, error)
	MessageAhead(ctx context.Context, width int64, ahead int) (created int, seq int64, err error)
	ExpireDone(ctx context.Context, at queue.ExpireAt, olderThan time.Duration, batch int) (next queue.ExpireAt, deleted int64, more bool, err error)
	RetireMessages(ctx context.Context, left, most int) (dropped int, moved int64, err error)
}

// joinStore is what the join sweep runs.
type joinStore interface {
	SweepJoins(ctx context.Context, all []string) ([]queue.Joined, error)
}

// vacuumStore is what the vacuum service (and its analyzer) runs.
type vacuumStore interface {
	TableChurn(ctx context.Context, table string) (queue.Churn, error)
	Vacuum(ctx context.Context, table string) error
	Stalenesses(ctx context.Context) ([]queue.Staleness, error)
	Analyze(ctx context.Context, table string) error
	FoldFailures(ctx context.Context) (int64, error)
}

// LockSession is the dispatcher's listener session: it holds the locks of
// its stage set and the janitor lock, and hears notifications.
type LockSession interface {
	// The checks at start.
	CheckSession(ctx context.Context) error
	CheckWorkerDSN(ctx context.Context, dsn string) error
	ConnectionLimit(ctx context.Context) (queue.ConnLimit, error)
	StageKeyClash(ctx context.Context, stages []string) (string, string, error)

	// The locks.
	TakeStages(ctx context.Context, stages []string, all bool, token int64) error
	WaitFor(ctx context.Context, stage string, all bool) error
	Release(ctx context.Context, stage string, all bool) error
	StandbyWaits(ctx context.Context, stages []string, all bool) (bool, error)
	TryJanitor(ctx context.Context) (bool, error)

	// The notifications and the heartbeat.
	Listen(ctx context.Context, record bool) error
	Wait(ctx context.Context, d time.Duration) (bool, error)
	Ping(ctx context.Context) error
	Close(ctx context.Context) error
}

// backend is how a dispatcher reaches its database: Options.OpenStore and
// DialLock, or pkg/queue's pool and listener session.
type backend struct {
	openStore func(ctx context.Context) (Store, error)
	dialLock  func(ctx context.Context) (LockSession, error)
}

// newBackend returns opts' backend, pkg/queue's on cfg's DSN for what
// opts leaves nil; set is the dispatcher's set (queue.SetName), the
// writer of the pool's statistics rows.
func newBackend(opts Options, set string) backend {
	b := backend{openStore: opts.OpenStore, dialLock: opts.DialLock}
	cfg := opts.Config
	if b.openStore == nil {
		b.openStore = func(ctx context.Context) (Store, error) {
			db, err := queue.Open(ctx, cfg.DSN, queue.Options{App: "pepsi dispatch queue", MaxConns: poolConns, Writer: set, NoJIT: true})
			if err != nil {
				return nil, err // not a Store holding a nil *queue.DB
			}
			return db, nil
		}
	}
	if b.dialLock == nil {
		b.dialLock = func(ctx context.Context) (LockSession, error) {
			lis, err := queue.Dial(ctx, cfg.DSN, cfg.Dispatch.IngressChannel)
			if err != nil {
				return nil, err // not a LockSession holding a nil *queue.Listener
			}
			return lis, nil
		}
	}
	return b
}

var (
	_ Store       = (*queue.DB)(nil)
	_ LockSession = (*queue.Listener)(nil)
)
