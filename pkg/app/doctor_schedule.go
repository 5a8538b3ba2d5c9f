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

// checkSchedules lists each [schedule-NAME]'s last and next run. It fails
// a schedule whose last slot was skipped, its message refused by the
// server (queue.ScheduleRun.Skipped), and warns of one that no dispatcher
// runs, or whose slot is overdue: then it says whether a dispatcher holds
// the janitor lock, for one that does and still has not enqueued the slot
// needs no other dispatcher but a look at its log or its pepsi.conf.
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
	var lines, unseen, overdue, skipped, skippedNames []string
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
		case r.Skipped():
			rep.ScheduleRun = r
			line += fmt.Sprintf("last %s skipped", fmtSlot(*r.LastSlot))
			skipped = append(skipped, fmt.Sprintf("%s's slot %s", s.Name, fmtSlot(*r.LastSlot)))
			skippedNames = append(skippedNames, s.Name)
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
	var res doctorResult
	var problems, actions []string
	add := func(status, problem, action string) {
		res.Status = worse(res.Status, status)
		problems, actions = append(problems, problem), append(actions, action)
	}
	if len(skipped) > 0 {
		add(statusFail, "the database refused the message of "+strings.Join(skipped, ", ")+": skipped",
			`the janitor dispatcher's log says why, in lines "schedule NAME: …" (`+strings.Join(skippedNames, ", ")+
				"); mend the section in "+cfgName(d.cfg)+" and restart the dispatchers with it")
	}
	if len(overdue) > 0 {
		holder, err := janitorHolder(d)
		switch {
		case err != nil:
			return broken(err)
		case holder == "":
			add(statusWarn, "not enqueued: "+strings.Join(overdue, ", ")+"; no dispatcher holds the janitor lock",
				"start a dispatcher (the one that holds the janitor lock enqueues the schedules): see the dispatchers and locks checks")
		default:
			add(statusWarn, "not enqueued: "+strings.Join(overdue, ", ")+", though "+holder+" holds the janitor lock",
				`see its log, lines "schedule NAME: …" (a failed enqueue is retried), and check that it runs with this `+cfgName(d.cfg)+
					" (it enqueues the [schedule-NAME] sections of its own, read at start)")
		}
	}
	if len(unseen) > 0 {
		add(statusWarn, "no dispatcher has run "+strings.Join(unseen, ", ")+" yet",
			"restart the dispatchers with this "+cfgName(d.cfg)+" (they read it at start; the one that holds the janitor lock enqueues the schedules)")
	}
	msg := strings.Join(lines, "; ")
	if len(problems) == 0 {
		return ok(msg, details)
	}
	res.Message = strings.Join(problems, "; ") + "; " + msg
	res.Action = strings.Join(actions, "; ")
	return res.with(details)
}

// janitorHolder names the session that holds the janitor lock (its
// application_name, "pepsi dispatch pid 812 on mx1"), or "" when none
// does.
func janitorHolder(d *doctor) (string, error) {
	stages, err := d.stages()
	if err != nil {
		return "", err
	}
	locks, err := d.db.AdvisoryLocks(d.ctx, stages)
	if err != nil {
		return "", err
	}
	for _, l := range locks {
		if l.Granted && l.Kind == queue.LockJanitor {
			if l.Name == "" {
				return fmt.Sprintf("server pid %d", l.PID), nil
			}
			return l.Name, nil
		}
	}
	return "", nil
}

// fmtSlot prints a slot in UTC, to the second.
func fmtSlot(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
