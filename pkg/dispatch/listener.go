package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The listener session holds the single-dispatcher lock and hears the
// ingress notifications. Its goroutine owns it: the loop only hears that
// it woke, failed, or was made again.

// backoff is the wait between tries at something that fails: it doubles,
// with jitter, from RECONNECT_MIN to RECONNECT_MAX while failures go on.
type backoff struct {
	min, max, cur time.Duration
}

// next returns the wait before the next try.
func (b *backoff) next() time.Duration {
	b.cur = min(max(2*b.cur, b.min), b.max)
	return jitter(b.cur)
}

// reset starts again from RECONNECT_MIN after a success.
func (b *backoff) reset() { b.cur = 0 }

// jitter returns a duration between d/2 and d.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reconnectBackoff is a fresh backoff from the configuration.
func (d *Dispatcher) reconnectBackoff() backoff {
	dc := &d.cfg.Dispatch
	return backoff{min: dc.ReconnectMin, max: dc.ReconnectMax}
}

// dial opens the listener session, retrying with backoff while the server
// cannot be reached.
func (d *Dispatcher) dial(ctx context.Context) (LockSession, error) {
	b := d.reconnectBackoff()
	for {
		lis, err := d.backend.dialLock(ctx)
		if err == nil {
			return lis, nil
		}
		if !pgerr.IsConnectFailure(err) {
			return nil, err
		}
		wait := b.next()
		d.log.Warn("database unavailable; retrying", "err", err, "next_in", wait.Round(time.Millisecond))
		if !sleep(ctx, wait) {
			return nil, errStopped
		}
	}
}

// lock takes the locks of the dispatcher's stage set on lis (see
// queue.Listener.TakeStages), whole or not at all; in standby it waits for
// the lock that refused it and tries again, until it has the whole set.
func (d *Dispatcher) lock(ctx context.Context, lis LockSession) error {
	all, stages := d.owned == nil, d.lockStages()
	var last string
	for {
		err := lis.TakeStages(ctx, stages, all, d.token)
		if err == nil {
			if last != "" {
				d.log.Info("standby: took over the dispatcher lock", "set", d.set)
			}
			return nil
		}
		if ctx.Err() != nil {
			return errStopped
		}
		var oe *queue.OwnedError
		if !errors.As(err, &oe) {
			return err
		}
		if !d.standby {
			return fmt.Errorf("%w: %w", ErrLocked, err)
		}
		if msg := err.Error(); msg != last {
			d.log.Info("standby: waiting for the dispatcher lock", "set", d.set, "because", msg)
			last = msg
		}
		// Wait in the server's lock queue for the lock that refused it,
		// then try the whole set again holding it; no lock is held while
		// waiting for another, so standbys of overlapping sets cannot
		// deadlock.
		if err := lis.WaitFor(ctx, oe.Stage, all); err != nil {
			if ctx.Err() != nil {
				return errStopped
			}
			return err
		}
		err = lis.TakeStages(ctx, stages, all, d.token)
		if err == nil {
			d.log.Info("standby: took over the dispatcher lock", "set", d.set)
			return lis.Release(ctx, oe.Stage, all)
		}
		if ctx.Err() != nil {
			return errStopped
		}
		if !errors.Is(err, queue.ErrLocked) {
			return err
		}
	}
}

// lockStages are the stages whose locks the dispatcher takes: those it
// owns, or every configured one.
func (d *Dispatcher) lockStages() []string {
	if d.owned == nil {
		return d.cfg.StageNames()
	}
	return d.owned
}

// checkKeys refuses a configuration in which two stage names share a lock
// (their hashtext is the same): a dispatcher owning one of them would keep
// another from owning the other.
func (d *Dispatcher) checkKeys(ctx context.Context, lis LockSession) error {
	a, b, err := lis.StageKeyClash(ctx, d.cfg.StageNames())
	if err != nil {
		return err
	}
	if a != "" {
		return fmt.Errorf("%s: stages %q and %q have the same lock key (hashtext); rename one", nameOf(d.cfg), a, b)
	}
	return nil
}

// listen waits for notifications and heartbeats on lis and wakes the loop;
// a failure is reported once and ends it. It closes lis when it ends.
func (d *Dispatcher) listen(ctx context.Context, lis LockSession) {
	defer closeListener(lis)
	poll := d.cfg.Dispatch.PollInterval
	for {
		got, err := lis.Wait(ctx, poll)
		if ctx.Err() != nil {
			return
		}
		if err == nil && !got {
			err = lis.Ping(ctx)
			if err == nil {
				// The janitor's work falls to another dispatcher when
				// the one doing it stops.
				err = d.takeJanitor(ctx, lis)
			}
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

// closeListener ends lis's session, releasing the lock if it holds it.
func closeListener(lis LockSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lis.Close(ctx)
}

// relisten reconnects the listener with backoff and re-takes the lock;
// losing the lock to another dispatcher is fatal, and so is a standby
// waiting for it: the stages are left to the standby.
func (d *Dispatcher) relisten(ctx context.Context) {
	b := d.reconnectBackoff()
	for sleep(ctx, b.next()) {
		lis, err := d.backend.dialLock(ctx)
		var standby bool
		if err == nil {
			standby, err = lis.StandbyWaits(ctx, d.lockStages(), d.owned == nil)
		}
		if err == nil && standby {
			closeListener(lis)
			d.fatal <- errors.New("lost the dispatcher lock to another dispatcher: a standby waits for it")
			return
		}
		if err == nil {
			if err = lis.TakeStages(ctx, d.lockStages(), d.owned == nil, d.token); errors.Is(err, queue.ErrLocked) {
				closeListener(lis)
				d.fatal <- fmt.Errorf("lost the dispatcher lock to another dispatcher: %w", err)
				return
			}
			if err == nil {
				err = d.takeJanitor(ctx, lis)
			}
			if err == nil {
				err = lis.Listen(ctx, d.role.has())
			}
			if err == nil {
				d.relisen <- lis
				return
			}
			// The session's locks go with it, the janitor lock too.
			d.role.set(false)
			closeListener(lis)
		}
		d.log.Warn("listener: reconnect failed", "err", err, "next_in", b.cur)
	}
}
