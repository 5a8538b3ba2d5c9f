// Package dispatch is pepsi's coordinator: it claims queued messages and
// feeds their ids to long-lived stage programs, and settles what they answer.
//
// One goroutine, the loop, owns every pool, worker and counter. Each
// worker's I/O goroutines and the listener only read, write and report to
// it on channels.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Options configures a dispatcher.
type Options struct {
	Config  *config.Config
	Log     *slog.Logger
	Standby bool             // wait for the single-dispatcher lock instead of failing
	Now     func() time.Time // the clock; time.Now when nil
	Observe Observer         // hears what happens, for metrics; nil: nobody
}

// ErrLocked is returned by Run when another dispatcher holds the lock.
var ErrLocked = errors.New("another dispatcher is running")

// Dispatcher is one running coordinator.
type Dispatcher struct {
	cfg     *config.Config
	log     *slog.Logger
	obs     Observer
	now     func() time.Time
	standby bool

	db  *queue.DB
	lis *queue.Listener

	pools  []*pool
	byName map[string]*pool
	seq    uint64

	events  chan event
	wake    chan struct{}
	lisErr  chan error
	relisen chan *queue.Listener
	fatal   chan error

	settles    []queue.Settle // verdicts for the next job
	spare      []queue.Settle // the other settles buffer, while a job has one
	caps       []queue.StageCap
	claimer    lane      // claims, resumes, the wake flag
	settler    lane      // settles
	results    chan *job // from both lanes
	marks      uint64    // counts markMore calls
	claimAt    time.Time // a small claim waits until then for more room (zero: none waits)
	workerDue  time.Time // no worker has a deadline before this (see due)
	backlog    int       // verdicts waiting to be settled beyond which nothing is claimed: every stage's room
	wakeGen    uint64    // counts wakes, so a job's result does not hide a later one
	waker      waker     // polling or waiting for notifications
	nextPaused time.Time
	checkPause bool
	retryAt    time.Time     // after a database error: no queue work before this
	backoff    time.Duration // the last wait after a database error; 0 after a success
	lockless   bool          // the lock session failed: no queue work until it is back with the lock
	tally      tally
	lastFlush  time.Time
	stopping   bool
	env        []string

	nextOrphans time.Time      // when the orphan sweep is due
	orphansNow  bool           // sweep orphans of any age at once (after a reconnect)
	nextExpire  time.Time      // when the retention sweep is due
	expiring    bool           // a retention sweep is walking the table
	expireAfter int64          // the last id it looked at
	expired     int64          // what it deleted so far
	bg          sync.WaitGroup // the listener's goroutines
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
		cfg:     opts.Config,
		log:     opts.Log,
		now:     opts.Now,
		standby: opts.Standby,
		byName:  make(map[string]*pool),
		events:  make(chan event, 1024),
		wake:    make(chan struct{}, 1),
		lisErr:  make(chan error, 1),
		relisen: make(chan *queue.Listener, 1),
		fatal:   make(chan error, 1),
		claimer: lane{jobs: make(chan *job, 1)},
		settler: lane{jobs: make(chan *job, 1)},
		results: make(chan *job, 2),
	}
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
	for _, s := range opts.Config.Stages {
		p := &pool{cfg: s, more: true, retry: queue.RetryPolicy{Retries: s.Retries, Delay: s.RetryDelay, Max: max(s.RetryMax, s.RetryDelay)}}
		d.pools = append(d.pools, p)
		d.backlog += s.Parallelism * s.QueueLimit
		d.byName[s.Name] = p
	}
	d.env = append(os.Environ(), "PEPSI_CONFIG="+d.cfg.Dispatch.ConfigFile, "PEPSI_DSN="+d.cfg.DSN)
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
	if err := d.start(ctx); err != nil {
		d.close()
		if errors.Is(err, errStopped) {
			d.log.Info("dispatcher stopped", "reason", err)
			return nil
		}
		return err
	}
	defer d.close()
	lctx, cancel := context.WithCancel(context.Background())
	d.goBackground(func() { d.listen(lctx, d.lis) })
	d.claimer.buf.lane, d.settler.buf.lane = &d.claimer, &d.settler
	d.goBackground(func() { d.runJobs(&d.claimer) })
	d.goBackground(func() { d.runJobs(&d.settler) })
	if every := d.cfg.Dispatch.VacuumInterval; every > 0 {
		d.goBackground(func() { d.vacuum(lctx, every) })
	}
	err := d.loop(ctx, lctx)
	close(d.claimer.jobs)
	close(d.settler.jobs)
	cancel()
	d.bg.Wait()
	select {
	case lis := <-d.relisen:
		_ = lis.Close(context.Background())
	default:
	}
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

// start connects, takes the lock and resets orphans.
func (d *Dispatcher) start(ctx context.Context) error {
	dc := d.cfg.Dispatch
	lis, err := d.dial(ctx)
	if err != nil {
		return err
	}
	d.lis = lis
	if err := d.lock(ctx, lis); err != nil {
		return err
	}
	maxConns := int32(5) // the two lanes, the loop's sweeps and flushes, the vacuum sweep, one spare
	if d.db, err = queue.Open(ctx, d.cfg.DSN, queue.Options{App: "pepsi dispatch queue", MaxConns: maxConns}); err != nil {
		return err
	}
	if err := d.db.CheckSchema(ctx); err != nil {
		return err
	}
	if err := lis.Listen(ctx); err != nil {
		return fmt.Errorf("listen on %q: %w", dc.IngressChannel, err)
	}
	n, err := d.db.ResetRunning(ctx)
	if err != nil {
		return fmt.Errorf("reset orphaned rows: %w", err)
	}
	d.tally.global.Orphans += n
	d.tally.dirty = n > 0
	if n > 0 {
		d.obs.OrphansRescued(n)
	}
	d.checkPause = true
	d.waker.start(d.now())
	d.nextOrphans = d.now().Add(dc.OrphanSweep)
	d.nextExpire = d.now()
	d.obs.Health(true)
	d.log.Info("dispatcher started", "pid", os.Getpid(), "stages", len(d.pools), "orphans_reset", n,
		"channel", dc.IngressChannel, "config", d.cfg.Dispatch.ConfigFile)
	return nil
}

// errStopped is returned by start when a signal came before dispatching
// began: while the server could not be reached, or while a standby waited
// for the lock.
var errStopped = errors.New("stopped before dispatching began")

// dial opens the listener session, retrying with backoff while the server
// cannot be reached.
func (d *Dispatcher) dial(ctx context.Context) (*queue.Listener, error) {
	dc := &d.cfg.Dispatch
	backoff := dc.ReconnectMin
	for {
		lis, err := queue.Dial(ctx, d.cfg.DSN, dc.IngressChannel)
		if err == nil || !queue.IsConnectFailure(err) {
			return lis, err
		}
		d.log.Warn("database unavailable; retrying", "err", err, "next_in", backoff)
		select {
		case <-ctx.Done():
			return nil, errStopped
		case <-time.After(jitter(backoff)):
		}
		backoff = min(2*backoff, dc.ReconnectMax)
	}
}

// jitter returns a duration between d/2 and d.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// lock takes the single-dispatcher lock on lis, or waits for it in standby.
func (d *Dispatcher) lock(ctx context.Context, lis *queue.Listener) error {
	holder, err := lis.TryLock(ctx)
	if errors.Is(err, queue.ErrLocked) && d.standby {
		d.log.Info("standby: waiting for the dispatcher lock", "holder_backend_pid", holder)
		err = lis.WaitLock(ctx)
		if err == nil {
			d.log.Info("standby: took over the dispatcher lock")
		} else if ctx.Err() != nil {
			return errStopped
		}
	}
	if errors.Is(err, queue.ErrLocked) {
		if app, _ := lis.SessionName(ctx, holder); app != "" {
			return fmt.Errorf("%w: %s (server pid %d)", ErrLocked, app, holder)
		}
		return fmt.Errorf("%w (server pid %d holds the lock)", ErrLocked, holder)
	}
	return err
}

// close releases what start acquired.
func (d *Dispatcher) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d.lis != nil {
		_ = d.lis.Close(ctx)
	}
	if d.db != nil {
		d.db.Close()
	}
}
