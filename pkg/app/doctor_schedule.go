package app

import (
	"fmt"
	"strings"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// scheduleReport is a schedule as the schedules check reports it.
type scheduleReport struct {
	queue.ScheduleRun            // its row; only the name when it has none
	When              string     `json:"when"` // CRON … or EVERY …
	Next              *time.Time `json:"next,omitempty"`
}

// checkSchedules lists each [schedule-NAME]'s last and next run, as the
// health model judges them (admin.Health.ScheduleStates). It fails a
// schedule whose last slot was skipped, and warns of one that no
// dispatcher runs, or whose slot is overdue: then it says whether a
// dispatcher holds the janitor lock, for one that does and still has not
// enqueued the slot needs no other dispatcher but a look at its log or its
// pepsi.conf.
func checkSchedules(d *doctor) doctorResult {
	if len(d.cfg.Schedules) == 0 {
		return ok("no [schedule-NAME] in "+cfgName(d.cfg), nil)
	}
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	var lines, unseen, overdue, skipped, skippedNames []string
	var details []scheduleReport
	for _, st := range h.ScheduleStates() {
		s, r := st.Schedule, st.Run
		rep := scheduleReport{ScheduleRun: r, When: s.Spec()}
		line := fmt.Sprintf("%s (%s, stage %s): ", s.Name, s.Spec(), s.Stage)
		switch {
		case !st.Seen:
			line += "never run"
			unseen = append(unseen, s.Name)
		case r.LastSlot == nil:
			line += "no slot yet"
		case st.Skipped():
			line += fmt.Sprintf("last %s skipped", fmtSlot(*r.LastSlot))
			skipped = append(skipped, fmt.Sprintf("%s's slot %s", s.Name, fmtSlot(*r.LastSlot)))
			skippedNames = append(skippedNames, s.Name)
		default:
			line += fmt.Sprintf("last %s (message %d)", fmtSlot(*r.LastSlot), *r.LastID)
		}
		if !st.Next.IsZero() {
			rep.Next = &st.Next
			line += ", next " + fmtSlot(st.Next)
		}
		if !st.Overdue.IsZero() {
			overdue = append(overdue, fmt.Sprintf("%s's slot %s", s.Name, fmtSlot(st.Overdue)))
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
		if h.Janitor == nil {
			add(statusWarn, "not enqueued: "+strings.Join(overdue, ", ")+"; no dispatcher holds the janitor lock",
				"start a dispatcher (the one that holds the janitor lock enqueues the schedules): see the dispatchers and locks checks")
		} else {
			add(statusWarn, "not enqueued: "+strings.Join(overdue, ", ")+", though "+janitorName(h.Janitor)+" holds the janitor lock",
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

// janitorName names the session that holds the janitor lock: its
// application_name ("pepsi dispatch pid 812 on mx1"), or its server pid.
func janitorName(l *admin.AdvisoryLock) string {
	if l.Name == "" {
		return fmt.Sprintf("server pid %d", l.PID)
	}
	return l.Name
}

// fmtSlot prints a slot in UTC, to the second.
func fmtSlot(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
