package dispatch

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

const sigKill = syscall.SIGKILL

// spawn starts a worker for p, or puts p in cooldown when its PROGRAM
// cannot start.
func (d *Dispatcher) spawn(p *pool, now time.Time) *worker {
	argv := append([]string(nil), p.cfg.Program...)
	if cf := d.cfg.Dispatch.ConfigFile; cf != "" {
		argv = append(argv, "-c", cf)
	}
	d.seq++
	w := &worker{seq: d.seq, pool: p, idleAt: now}
	proc, err := startProcess(w, spawnSpec{
		argv:   argv,
		env:    append(d.env[:len(d.env):len(d.env)], "PEPSI_STAGE="+p.cfg.Name),
		stage:  p.cfg.Name,
		log:    d.log,
		obs:    d.obs,
		events: d.events,
		feed:   p.cfg.QueueLimit + 1,
	})
	if err != nil {
		d.obs.WorkerStartFailed(p.cfg.Name)
		d.cooldown(p, now, "cannot start PROGRAM: "+err.Error())
		return nil
	}
	d.obs.WorkerStarted(p.cfg.Name)
	w.proc = proc
	p.workers = append(p.workers, w)
	d.due(now.Add(d.cfg.Dispatch.WorkerIdleTimeout))
	if p.cooling {
		p.cooling = false
		d.log.Info("stage recovered: worker started", "stage", p.cfg.Name, "pid", proc.pid)
	} else {
		d.log.Debug("worker started", "stage", p.cfg.Name, "pid", proc.pid)
	}
	return w
}

// cooldown holds p off claims and starts for SPAWN_COOLDOWN; the first
// cooldown of an episode is logged.
func (d *Dispatcher) cooldown(p *pool, now time.Time, why string) {
	p.coolUntil = now.Add(d.cfg.Dispatch.SpawnCooldown)
	if !p.cooling {
		p.cooling = true
		d.log.Error("stage held off", "stage", p.cfg.Name, "program", p.cfg.ProgramText,
			"cooldown", d.cfg.Dispatch.SpawnCooldown, "reason", why)
	}
}

// stop tells w to exit: its stdin is closed (and with term, SIGTERM sent);
// it is killed if still running after SHUTDOWN_GRACE.
func (d *Dispatcher) stop(w *worker, now time.Time, term bool) {
	if w.stopping {
		return
	}
	w.stopping = true
	w.killAt = now.Add(d.cfg.Dispatch.ShutdownGrace)
	d.due(w.killAt)
	w.flush()
	close(w.proc.feed)
	if term {
		w.proc.signal(syscall.SIGTERM)
	}
}

// beginStop stops claiming and tells every worker to exit.
func (d *Dispatcher) beginStop() {
	if d.stopping {
		return
	}
	d.stopping = true
	now := d.now()
	for _, p := range d.pools {
		for _, w := range p.workers {
			d.stop(w, now, true)
		}
	}
}

// finish puts the messages still held back, writes the statistics and
// returns the loop's result.
func (d *Dispatcher) finish(fatal error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if d.lockless && len(d.settles) > 0 {
		// Another dispatcher may hold the lock and these rows by now.
		err = errors.New("the dispatcher lock is not held")
	}
	for attempt := 0; attempt < 10 && !d.lockless; attempt++ {
		if err = d.settleNow(ctx); err == nil {
			break
		}
		d.log.Error("database: settling on shutdown failed; retrying", "err", err)
		time.Sleep(time.Second)
	}
	if err != nil {
		d.log.Error("giving up: messages stay running until the next start resets them", "count", len(d.settles))
	} else if !d.lockless {
		// No one listens now: producers need not notify (the next
		// dispatcher claims everything pending when it starts).
		if err := d.db.SetArmed(ctx, false); err != nil {
			d.log.Warn("database: clearing the wake flag failed", "err", err)
		}
	}
	if d.tally.dirty {
		d.flushStats(ctx, d.now())
	}
	d.observePools()
	d.obs.Health(false)
	d.log.Info("dispatcher stopped")
	return fatal
}

// listen waits for notifications and heartbeats on lis and wakes the loop;
// a failure is reported once and ends it.
func (d *Dispatcher) listen(ctx context.Context, lis *queue.Listener) {
	poll := d.cfg.Dispatch.PollInterval
	for {
		got, err := lis.Wait(ctx, poll)
		if ctx.Err() != nil {
			return
		}
		if err == nil && !got {
			err = lis.Ping(ctx)
		}
		if err != nil {
			d.lisErr <- err
			return
		}
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// relisten reconnects the listener with backoff and jitter and re-takes the
// lock; losing the lock to another dispatcher is fatal.
func (d *Dispatcher) relisten(ctx context.Context) {
	dc := &d.cfg.Dispatch
	backoff := dc.ReconnectMin
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		lis, err := queue.Dial(ctx, d.cfg.DSN, d.cfg.Dispatch.IngressChannel)
		if err == nil {
			var holder int32
			if holder, err = lis.TryLock(ctx); errors.Is(err, queue.ErrLocked) {
				_ = lis.Close(ctx)
				d.fatal <- fmt.Errorf("lost the dispatcher lock to another dispatcher (server pid %d)", holder)
				return
			}
			if err == nil {
				err = lis.Listen(ctx)
			}
			if err == nil {
				d.relisen <- lis
				return
			}
			_ = lis.Close(ctx)
		}
		d.log.Warn("listener: reconnect failed", "err", err, "next_in", backoff)
		backoff = min(2*backoff, dc.ReconnectMax)
	}
}
