// Package dispatch is pepsi's coordinator: it claims queued messages and
// feeds their ids to long-lived stage programs, and settles what they answer.
//
// One goroutine, the loop, owns every pool, worker and counter. Each
// worker's I/O goroutines, the lanes, the janitor's services and the
// listener only read, write and report to it on channels.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Options configures a dispatcher.
type Options struct {
	Config  *config.Config
	Log     *slog.Logger
	Standby bool             // wait until the dispatcher's whole stage set is free instead of failing
	Now     func() time.Time // the clock; time.Now when nil
	Observe Observer         // hears what happens, for metrics; nil: nobody

	// OpenStore opens the queue's pool, once the lock is taken; nil:
	// queue.Open on DSN.
	OpenStore func(ctx context.Context) (Store, error)
	// DialLock opens a listener session, at start and again after one
	// fails; nil: queue.Dial on DSN and INGRESS_CHANNEL. At start, an error
	// pgerr.IsConnectFailure accepts is retried with backoff.
	DialLock func(ctx context.Context) (LockSession, error)
}

// ErrLocked is returned by Run when another dispatcher owns one of its
// stages (errors.Is; the error names the stage and the holder).
var ErrLocked = errors.New("another dispatcher is running")

// Dispatcher is one running coordinator. Only its loop goroutine reads or
// writes it (but for role), and it holds no database session: the lanes,
// the janitor's services and the listener goroutine own those.
type Dispatcher struct {
	cfg     *config.Config
	log     *slog.Logger
	obs     Observer
	now     func() time.Time
	standby bool
	env     []string // the stage programs' environment

	answersDueFn func() bool // answersDue, bound once (a method value made per question would allocate)
	backend      backend     // how it reaches the database (Options.OpenStore, DialLock)

	// The stages this dispatcher owns (STAGES, --stages; nil: every stage
	// of the configuration, and every other dispatcher excluded), and its
	// set's name in the statistics and wake rows (queue.SetName).
	owned []string
	set   string
	token int64 // the token lock of every listener session (queue.NewToken; see queue.DB.SetFence)
	// passes stamps each claim's passes with a token of their own (taken
	// anew at each start).
	passes queue.PassTokens
	// role: whether this dispatcher holds the janitor lock and so does the
	// work that is not per stage (janitor.go). Shared with the listener
	// goroutine and the services' supervisor.
	role        janitorRole
	maintaining bool // the janitor's services may run: a stop waits until they have stopped

	// The stages and their workers.
	pools     []*pool
	byName    map[string]*pool
	seq       uint64          // counts workers started
	workerDue time.Time       // no worker has a deadline before this (see due)
	unknown   map[string]bool // stages settles moved messages to that no pool has (warned once)
	foreign   map[string]bool // configured stages another dispatcher owns

	// What the goroutines report to the loop.
	events   chan event         // from the workers' I/O goroutines
	results  chan *job          // from the turn lanes
	choreRes chan choreResult   // from the chore lane
	reports  chan serviceReport // from the janitor's services
	wake     chan struct{}      // from the listener: a notification or heartbeat
	lisErr   chan error         // from the listener: its session failed
	relisen  chan LockSession   // from relisten: the listener is back, with the lock
	fatal    chan error         // from relisten: the lock was lost
	bg       sync.WaitGroup     // every goroutine but the workers'

	queueWork
	choreState
	stopState

	// After a database error.
	retryAt  time.Time // no queue work before this
	backoff  backoff   // the wait before retryAt
	lockless bool      // the lock session failed: no queue work until it is back with the lock
	lockGone bool      // lockless, and the lock will not come back: another dispatcher has it
	outage   outage    // what a database outage did to passes in flight
	tracer   *tracer   // spans of passes; nil: TRACING off

}

// queueWork is the lanes and the planner whose decisions they carry out.
type queueWork struct {
	plan    *planner  // what to claim and settle, and when
	claimer lane      // claims, resumes, the wake flag
	settler lane      // settles
	chores  choreLane // the orphan sweep, statistics, the wake flag at stop
}

// choreState is when the loop's chores are due and what they write.
type choreState struct {
	tally       tally     // statistics not yet written
	lastFlush   time.Time // when they were last written
	nextOrphans time.Time // when the orphan sweep is due
	orphansNow  bool      // sweep orphans of any age at once (after a reconnect)
}

// stopState is how far a stop has come.
type stopState struct {
	stopping bool      // no more claims; workers told to exit
	stopBy   time.Time // give up on the database after this
	disarmed bool      // the wake flag is cleared
	wrapped  bool      // the last chore is done
}

// New checks opts and returns a dispatcher ready to Run.
func New(opts Options) (*Dispatcher, error) {
	if opts.Config == nil {
		return nil, errors.New("dispatch: no configuration")
	}
	if len(opts.Config.Stages) == 0 {
		return nil, fmt.Errorf("%s: no [stage-NAME] sections: nothing to dispatch", nameOf(opts.Config))
	}
	d := &Dispatcher{
		cfg:      opts.Config,
		log:      opts.Log,
		now:      opts.Now,
		standby:  opts.Standby,
		byName:   make(map[string]*pool),
		role:     newJanitorRole(),
		events:   make(chan event, 1024),
		wake:     make(chan struct{}, 1),
		lisErr:   make(chan error, 1),
		relisen:  make(chan LockSession, 1),
		fatal:    make(chan error, 1),
		results:  make(chan *job, 2),        // a turn of each lane: a lane never blocks on it
		choreRes: make(chan choreResult, 1), // the chore lane's one chore
		reports:  make(chan serviceReport, 8),
	}
	for _, l := range d.lanes() {
		l.jobs = make(chan *job, 1)
		l.buf.lane = l
	}
	d.chores.jobs = make(chan chore, 1)
	d.backoff = d.reconnectBackoff()
	d.tally.token = rand.Int64()
	if d.log == nil {
		d.log = slog.Default()
	}
	if d.now == nil {
		d.now = time.Now
	}
	d.obs = opts.Observe
	if d.obs == nil {
		d.obs = nopObserver{}
	}
	if !opts.Config.OwnsAll() {
		d.owned = slices.Clone(opts.Config.StageSet)
		d.foreign = make(map[string]bool)
		for _, s := range opts.Config.Stages {
			d.foreign[s.Name] = !slices.Contains(d.owned, s.Name)
		}
	}
	d.set = queue.SetName(d.owned)
	d.token = queue.NewToken()
	d.plan = newPlanner(d.owned, d.set)
	d.answersDueFn = d.answersDue
	d.backend = newBackend(opts, d.set)
	for _, s := range opts.Config.Owned() {
		p := &pool{cfg: s, retry: queue.RetryPolicy{Retries: s.Retries, Delay: s.RetryDelay, Max: max(s.RetryMax, s.RetryDelay)}}
		p.plan = d.plan.add(s, p)
		d.pools = append(d.pools, p)
		d.byName[s.Name] = p
	}
	d.plan.startRates(d.now())
	if err := d.startTracing(); err != nil {
		return nil, err
	}
	d.env = append(os.Environ(), "PEPSI_CONFIG="+d.cfg.Dispatch.ConfigFile, "PEPSI_DSN="+d.cfg.StageDSN(),
		protocol.EnvProtocol+"="+strconv.Itoa(protocol.Version))
	return d, nil
}

func nameOf(c *config.Config) string {
	if c.Path == "" {
		return "configuration"
	}
	return c.Path
}

// Run takes the single-dispatcher lock, resets orphaned rows, and
// dispatches until ctx is cancelled; then it stops every worker, puts their
// unanswered messages back, flushes the statistics and returns nil.
func (d *Dispatcher) Run(ctx context.Context) error {
	db, lis, err := d.start(ctx)
	if err != nil {
		if lis != nil {
			closeListener(lis)
		}
		if db != nil {
			db.Close()
		}
		if errors.Is(err, errStopped) {
			d.log.Info("dispatcher stopped", "reason", err)
			return nil
		}
		return err
	}
	// lctx ends the goroutines; cancelling it also cancels what the lanes
	// and services still run when a stop gave up on the database.
	lctx, cancel := context.WithCancel(context.Background())
	d.goBackground(func() { d.listen(lctx, lis) })
	for _, l := range d.lanes() {
		d.goBackground(func() { l.run(lctx, db, d.results) })
	}
	d.goBackground(func() { d.chores.run(lctx, db, d.choreRes) })
	services := janitorServices(d, db)
	d.maintaining = true
	d.goBackground(func() { d.role.maintain(lctx, services, d.reports, d.log) })
	err = d.loop(ctx, lctx)
	cancel()
	for _, l := range d.lanes() {
		close(l.jobs)
	}
	close(d.chores.jobs)
	d.bg.Wait()
	d.stopTracing()
	select {
	case lis := <-d.relisen:
		closeListener(lis)
	default:
	}
	db.Close()
	return err
}

// goBackground runs fn on a goroutine that Run waits for before it returns.
func (d *Dispatcher) goBackground(fn func()) {
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		fn()
	}()
}

// start connects, takes the lock, writes its stages' KEY and resets
// orphans: the only statements run before the loop, and so the only ones
// not on a lane.
func (d *Dispatcher) start(ctx context.Context) (db Store, lis LockSession, err error) {
	dc := d.cfg.Dispatch
	if lis, err = d.dial(ctx); err != nil {
		return nil, nil, err
	}
	if err := lis.CheckSession(ctx); err != nil { // not through a transaction-mode pooler
		if ctx.Err() != nil {
			err = errStopped
		}
		return nil, lis, err
	}
	if err := d.checkWorkerDSN(ctx, lis); err != nil {
		return nil, lis, err
	}
	if err := d.checkLimits(ctx, lis); err != nil {
		return nil, lis, err
	}
	if err := d.checkKeys(ctx, lis); err != nil {
		return nil, lis, err
	}
	if err := d.lock(ctx, lis); err != nil {
		return nil, lis, err
	}
	if db, err = d.backend.openStore(ctx); err != nil {
		return nil, lis, err
	}
	if err := db.CheckSchema(ctx); err != nil {
		return db, lis, err
	}
	db.SetFence(d.token, d.lockStages())
	if err := d.takeJanitor(ctx, lis); err != nil {
		return db, lis, err
	}
	if err := lis.Listen(ctx, d.role.has()); err != nil {
		return db, lis, fmt.Errorf("listen on %q: %w", dc.IngressChannel, err)
	}
	if err := d.setKeys(ctx, db); err != nil {
		return db, lis, err
	}
	n, err := db.ResetRunning(ctx, d.owned...)
	if err != nil {
		return db, lis, fmt.Errorf("reset orphaned rows: %w", err)
	}
	if d.passes, err = db.NewPassTokens(ctx); err != nil {
		return db, lis, fmt.Errorf("take a run number for pass tokens: %w", err)
	}
	d.tally.global.Orphans += n
	d.tally.dirty = n > 0
	if n > 0 {
		d.obs.OrphansRescued(n)
	}
	d.plan.start(d.now())
	d.nextOrphans = d.now().Add(dc.OrphanSweep)
	d.obs.Health(true)
	d.log.Info("dispatcher started", "pid", os.Getpid(), "stages", len(d.pools), "set", d.set, "janitor", d.role.has(), "orphans_reset", n,
		"channel", dc.IngressChannel, "config", d.cfg.Dispatch.ConfigFile, "procs", runtime.GOMAXPROCS(0))
	return db, lis, nil
}

// checkWorkerDSN refuses a WORKER_DSN that does not reach the database
// DSN reaches, where every message would fail in its stage: another
// database is a configuration error (exit 2), one that cannot be
// connected to a runtime one. It runs before the lock is waited for, so
// that a standby finds out at start, not when it takes over.
func (d *Dispatcher) checkWorkerDSN(ctx context.Context, lis LockSession) error {
	if d.cfg.WorkerDSN == "" {
		return nil
	}
	err := lis.CheckWorkerDSN(ctx, d.cfg.WorkerDSN)
	var oe *queue.OtherDatabaseError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errStopped
	case errors.As(err, &oe):
		return &config.Error{File: nameOf(d.cfg), Msg: "WORKER_DSN " + oe.Error()}
	}
	return fmt.Errorf("%s: WORKER_DSN: %w", nameOf(d.cfg), err)
}

// errStopped is returned by start when a signal came before dispatching
// began: while the server could not be reached, or while a standby waited
// for the lock.
var errStopped = errors.New("stopped before dispatching began")
