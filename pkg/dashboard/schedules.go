package dashboard

import (
	"net/http"
	"slices"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The schedules page: each [schedule-NAME] of pepsi.conf with its last
// slot (pepsi.schedule: when, and its message) and its next one, judged by
// the health model as pepsi doctor's schedules check judges it
// (admin.Health.ScheduleStates); then the rows of pepsi.schedule no
// section configures any more.

// scheduleRow is one schedule as the page lists it.
type scheduleRow struct {
	Name  string `json:"name"`
	When  string `json:"when"`  // CRON … or EVERY …; "" when not configured
	Stage string `json:"stage"` // "" when not configured
	// Configured: pepsi.conf has its section (those this server read at
	// start); Seen: a dispatcher has run it (it has a row).
	Configured bool `json:"configured"`
	Seen       bool `json:"seen"`
	queue.ScheduleRun
	Next *time.Time `json:"next,omitempty"` // its next slot
	// Overdue is its latest slot that is late and was not enqueued.
	Overdue *time.Time `json:"overdue,omitempty"`
	// State is ok, never_run, no_slot_yet, skipped, overdue or
	// not_configured.
	State string `json:"state"`
}

// schedulesPage is the schedules page's data.
type schedulesPage struct {
	Schedules []scheduleRow `json:"schedules"`
	Now       time.Time     `json:"now"` // the server's clock
	Refresh   int           `json:"-"`
}

func (d *Dashboard) schedules(w http.ResponseWriter, r *http.Request, db *admin.DB) {
	if !d.paramsOK(w, r) {
		return
	}
	refresh, ok := d.refreshParam(w, r, 0)
	if !ok {
		return
	}
	ctx := r.Context()
	runs, err := db.Schedules(ctx)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	now, err := db.Now(ctx)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	read := time.Now()
	page := schedulesPage{Schedules: scheduleRows(d.opts.Schedules, d.opts.PollInterval, runs, now), Now: now, Refresh: refresh}
	d.render(w, r, http.StatusOK, "schedules", view{Title: "Schedules", Nav: "schedules", Refresh: refresh, Updated: read, Page: page})
}

// scheduleRows judges the configured schedules (the health model's
// ScheduleStates, at now) and adds the rows of runs no section
// configures, by name.
func scheduleRows(configured []config.Schedule, poll time.Duration, runs []queue.ScheduleRun, now time.Time) []scheduleRow {
	h := &admin.Health{Config: admin.HealthConfig{Schedules: configured, PollInterval: poll}, Now: now, Schedules: runs}
	out := []scheduleRow{}
	for _, st := range h.ScheduleStates() {
		x := scheduleRow{Name: st.Schedule.Name, When: st.Schedule.Spec(), Stage: st.Schedule.Stage, Configured: true, Seen: st.Seen, ScheduleRun: st.Run}
		if !st.Next.IsZero() {
			x.Next = &st.Next
		}
		if !st.Overdue.IsZero() {
			x.Overdue = &st.Overdue
		}
		switch {
		case !st.Seen:
			x.State = "never_run"
		case st.Skipped():
			x.State = "skipped"
		case x.Overdue != nil:
			x.State = "overdue"
		case st.Run.LastSlot == nil:
			x.State = "no_slot_yet"
		default:
			x.State = "ok"
		}
		out = append(out, x)
	}
	for _, r := range runs {
		if !slices.ContainsFunc(configured, func(s config.Schedule) bool { return s.Name == r.Name }) {
			out = append(out, scheduleRow{Name: r.Name, Seen: true, ScheduleRun: r, State: "not_configured"})
		}
	}
	return out
}
