package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

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
func (d *Dispatcher) dial(ctx context.Context) (*queue.Listener, error) {
	b := d.reconnectBackoff()
	for {
		lis, err := queue.Dial(ctx, d.cfg.DSN, d.cfg.Dispatch.IngressChannel)
		if err == nil || !queue.IsConnectFailure(err) {
			return lis, err
		}
		wait := b.next()
		d.log.Warn("database unavailable; retrying", "err", err, "next_in", wait.Round(time.Millisecond))
		if !sleep(ctx, wait) {
			return nil, errStopped
		}
	}
}

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

// listen waits for notifications and heartbeats on lis and wakes the loop;
// a failure is reported once and ends it. It closes lis when it ends.
func (d *Dispatcher) listen(ctx context.Context, lis *queue.Listener) {
	defer closeListener(lis)
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

// closeListener ends lis's session, releasing the lock if it holds it.
func closeListener(lis *queue.Listener) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lis.Close(ctx)
}

// relisten reconnects the listener with backoff and re-takes the lock;
// losing the lock to another dispatcher is fatal.
func (d *Dispatcher) relisten(ctx context.Context) {
	b := d.reconnectBackoff()
	for sleep(ctx, b.next()) {
		lis, err := queue.Dial(ctx, d.cfg.DSN, d.cfg.Dispatch.IngressChannel)
		if err == nil {
			var holder int32
			if holder, err = lis.TryLock(ctx); errors.Is(err, queue.ErrLocked) {
				closeListener(lis)
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
			closeListener(lis)
		}
		d.log.Warn("listener: reconnect failed", "err", err, "next_in", b.cur)
	}
}
