package dispatch

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Periodic enqueue: the [schedule-NAME] sections of pepsi.conf. The
// scheduler is one of the janitor's services (janitor.go): while this
// dispatcher holds the janitor lock, at each slot of each schedule
// (config.Schedule's Next and Latest) it enqueues one message, with the
// key schedule:NAME:UNIX-SECONDS, in the transaction that records the slot
// in pepsi.schedule (queue.DB.FireSchedule). The database, not the role,
// is what makes each slot go once: a slot is enqueued only where it moves
// the schedule's last slot forward, so a dispatcher that takes the role
// over (a standby, another stage set, this one after a restart), or two
// that both think they hold it, never enqueue a slot again, nor one whose
// message finished (its key free again). Whatever was missed while no
// janitor ran comes as one message, the latest missed slot's: each time it
// wakes, the scheduler enqueues the latest slot at or before now.

// scheduleStore is what the scheduler runs.
type scheduleStore interface {
	resetter
	FireSchedule(ctx context.Context, o queue.Occurrence) (queue.Fired, error)
	SkipSchedule(ctx context.Context, o queue.Occurrence) (bool, error)
}

// scheduler is the janitor's service that enqueues the schedules' slots.
type scheduler struct {
	startStop
	store     scheduleStore
	schedules []config.Schedule
	log       *slog.Logger
	now       func() time.Time
	retry     backoff              // the wait after a failed enqueue
	report    chan<- serviceReport // the enqueues that failed
}

// newScheduler returns the scheduler of d's schedules on store; nil when
// there are none.
func newScheduler(d *Dispatcher, store scheduleStore) *scheduler {
	if len(d.cfg.Schedules) == 0 {
		return nil
	}
	return &scheduler{store: store, schedules: d.cfg.Schedules, log: d.log, now: d.now, retry: d.reconnectBackoff(), report: d.reports}
}

// Start enqueues each schedule's due slot at once, and each next one when
// it falls due, until Stop.
func (s *scheduler) Start(ctx context.Context) error {
	s.start(ctx, s.run)
	return nil
}

// run enqueues until stop. An enqueue runs under ctx: a Stop lets the one
// in flight finish. One schedule's failure holds up no other: an enqueue
// the server refused for its values is skipped (see fire), and one that
// failed otherwise is tried again after a backoff, as the latest slot then
// due, while the others go on. Only a failure of the database itself (an
// outage, a lost fence) holds them all up until the backoff is over: they
// would fail as well.
func (s *scheduler) run(ctx, stop context.Context) {
	s.log.Info("schedules: this dispatcher enqueues them (janitor)", "schedules", len(s.schedules))
	due := make([]time.Time, len(s.schedules))  // when each schedule is looked at next (zero: now)
	done := make([]time.Time, len(s.schedules)) // the latest slot each had enqueued, or found enqueued, in this run
	for {
		now := s.now()
		wait, outage := time.Duration(-1), false // wait: the backoff, once a schedule failed in this round
		for i := range s.schedules {
			sc := &s.schedules[i]
			if now.Before(due[i]) {
				continue
			}
			err := s.fire(ctx, sc, now, &done[i])
			if err != nil && ctx.Err() != nil {
				return // the dispatcher gave up on the database
			}
			if err != nil {
				if wait < 0 {
					wait = s.retry.next()
				}
				s.send(ctx, serviceReport{err: err})
				if outage = queue.IsOutage(err) || queue.IsFenced(err); outage {
					logRetry(s.log, "schedule", err, wait)
					break
				}
				s.log.Error("schedule "+sc.Name+": enqueue failed; retrying", "err", err, "next_in", wait.Round(time.Millisecond))
				due[i] = now.Add(wait)
				continue
			}
			due[i] = sc.Next(now)
			if due[i].IsZero() { // none within five years: look again in a day
				due[i] = now.Add(24 * time.Hour)
			}
		}
		if wait < 0 {
			s.retry.reset()
		}
		if !outage {
			wait = max(slices.MinFunc(due, time.Time.Compare).Sub(s.now()), 0)
		}
		if stop.Err() != nil || !sleep(stop, wait) {
			return
		}
	}
}

// send hands rep to the loop, unless the dispatcher gave up on the
// database (the loop may have returned).
func (s *scheduler) send(ctx context.Context, rep serviceReport) {
	select {
	case s.report <- rep:
	case <-ctx.Done():
	}
}

// fire enqueues sc's latest slot at or before now, unless this run has
// seen it go already; *done is that slot once it has.
func (s *scheduler) fire(ctx context.Context, sc *config.Schedule, now time.Time, done *time.Time) error {
	slot := sc.Latest(now)
	if slot.IsZero() || !slot.After(*done) {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	f, err := s.store.FireSchedule(fctx, queue.Occurrence{Schedule: sc.Name, Slot: slot, Now: now,
		Stage: sc.Stage, Payload: sc.Payload, Headers: sc.Headers, Priority: sc.Priority})
	if queue.IsReadOnly(err) {
		s.store.Reset() // a demoted primary: the next connections find the new one
	}
	if queue.IsDataError(err) {
		return s.skip(ctx, sc, slot, now, done, err)
	}
	if err != nil {
		return err
	}
	*done = slot
	if !f.Enqueued {
		return nil
	}
	if missed := missedSlots(sc, f.After, slot); missed > 0 {
		s.log.Info("schedule: enqueued the latest of the slots missed while no janitor ran", "schedule", sc.Name, "slot", slot,
			"id", f.ID, "stage", sc.Stage, "missed", missed, "previous", f.After)
	} else {
		s.log.Debug("schedule: enqueued", "schedule", sc.Name, "slot", slot, "id", f.ID, "stage", sc.Stage)
	}
	return nil
}

// skip records sc's slot as gone without a message after the server
// refused its enqueue (refused, the cause) for the values it carries: a
// retry would be refused the same way, for ever, as cron runs a failing
// job again at its next time and not at once. The next slot is tried as
// usual; pepsi doctor reports the skip until a slot goes. It returns what
// failed to record the skip, to be retried as a failed enqueue is.
func (s *scheduler) skip(ctx context.Context, sc *config.Schedule, slot, now time.Time, done *time.Time, refused error) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := s.store.SkipSchedule(ctx, queue.Occurrence{Schedule: sc.Name, Slot: slot, Now: now}); err != nil {
		return err
	}
	*done = slot
	s.log.Error("schedule "+sc.Name+": the database refused the slot's message; skipped it, the next slot is tried as usual",
		"slot", slot, "stage", sc.Stage, "err", refused, "next", sc.Next(now))
	return nil
}

// missedSlots counts sc's slots after after and before slot (at most
// 1000: a count for the log).
func missedSlots(sc *config.Schedule, after, slot time.Time) int {
	n := 0
	for t := sc.Next(after); !t.IsZero() && t.Before(slot) && n < 1000; t = sc.Next(t) {
		n++
	}
	return n
}
