package app

import (
	"fmt"
	"strings"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// scheduleLate is how long past its time a slot of a [schedule-NAME] may
// still be unenqueued without a warning, at least: the janitor role moves
// at a dispatcher's heartbeat (POLL_INTERVAL).
const scheduleLate = time.Minute

// scheduleReport is a schedule as the schedules check reports it.
type scheduleReport struct {
	queue.ScheduleRun            // its row; only the name when it has none
	When              string     `json:"when"` // CRON … or EVERY …
	Next              *time.Time `json:"next,omitempty"`
}

// checkSchedules lists each [schedule-NAME]'s last and next run, and
// warns of one that no dispatcher runs, or whose slot is overdue.
func checkSchedules(d *doctor) doctorResult {
	if len(d.cfg.Schedules) == 0 {
		return ok("no [schedule-NAME] in "+cfgName(d.cfg), nil)
	}
	runs, err := d.db.Schedules(d.ctx)
	if err != nil {
		return broken(err)
	}
	byName := map[string]queue.ScheduleRun{}
	for _, r := range runs {
		byName[r.Name] = r
	}
	now := time.Now()
	late := max(2*d.cfg.Dispatch.PollInterval, scheduleLate)
	var lines, unseen, overdue []string
	var details []scheduleReport
	for i := range d.cfg.Schedules {
		s := &d.cfg.Schedules[i]
		rep := scheduleReport{ScheduleRun: queue.ScheduleRun{Name: s.Name}, When: s.Spec()}
		line := fmt.Sprintf("%s (%s, stage %s): ", s.Name, s.Spec(), s.Stage)
		r, seen := byName[s.Name]
		switch {
		case !seen:
			line += "never run"
			unseen = append(unseen, s.Name)
		case r.LastSlot == nil:
			rep.ScheduleRun = r
			line += "no slot yet"
		default:
			rep.ScheduleRun = r
			line += fmt.Sprintf("last %s (message %d)", fmtSlot(*r.LastSlot), *r.LastID)
		}
		if next := s.Next(now); !next.IsZero() {
			rep.Next = &next
			line += ", next " + fmtSlot(next)
		}
		if due := s.Latest(now.Add(-late)); seen && !due.IsZero() && due.After(r.Since) && (r.LastSlot == nil || due.After(*r.LastSlot)) {
			overdue = append(overdue, fmt.Sprintf("%s's slot %s", s.Name, fmtSlot(due)))
		}
		lines = append(lines, line)
		details = append(details, rep)
	}
	msg := strings.Join(lines, "; ")
	switch {
	case len(overdue) > 0:
		return warn("not enqueued: "+strings.Join(overdue, ", ")+"; "+msg,
			"start a dispatcher (the one that holds the janitor lock enqueues the schedules): see the dispatchers and locks checks").with(details)
	case len(unseen) > 0:
		return warn("no dispatcher has run "+strings.Join(unseen, ", ")+" yet; "+msg,
			"restart the dispatchers with this "+cfgName(d.cfg)+" (they read it at start; the one that holds the janitor lock enqueues the schedules)").with(details)
	}
	return ok(msg, details)
}

// fmtSlot prints a slot in UTC, to the second.
func fmtSlot(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
