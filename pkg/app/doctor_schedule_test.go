package app

import (
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestDoctorSchedules: the schedules check lists each schedule's last and
// next run; it warns of one no dispatcher has run yet, and of one whose
// slot is overdue (no janitor enqueued it).
func TestDoctorSchedules(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, "[stage-a]\nPROGRAM = /bin/true\n"+
		"[schedule-tick]\nEVERY = 1h\nSTAGE = a\n"+
		"[schedule-report]\nCRON = 30 2 * * *\nSTAGE = a\n")
	now := time.Now().UTC()
	hour, day := now.Truncate(time.Hour), now.Truncate(24*time.Hour)

	run := doctorJSON(t)
	run.want(t, "schedules", statusWarn, "no dispatcher has run tick, report yet",
		"tick (EVERY 1h0m0s, stage a): never run, next "+fmtSlot(hour.Add(time.Hour)))

	// tick enqueued its last slot; report was first seen a week ago and
	// never enqueued since.
	execSQL(t, dsn, "INSERT INTO pepsi.schedule (name, since, last_slot, last_id, last_at) VALUES ('tick', $1, $2, 42, $2)", now.Add(-48*time.Hour), hour)
	execSQL(t, dsn, "INSERT INTO pepsi.schedule (name, since) VALUES ('report', $1)", day.Add(-7*24*time.Hour))
	run = doctorJSON(t)
	run.want(t, "schedules", statusWarn, "not enqueued: report's slot", "tick (EVERY 1h0m0s, stage a): last "+fmtSlot(hour)+" (message 42)",
		"report (CRON 30 2 * * *, stage a): no slot yet")

	execSQL(t, dsn, "UPDATE pepsi.schedule SET last_slot = now(), last_id = 43 WHERE name = 'report'")
	run = doctorJSON(t)
	run.want(t, "schedules", statusOK, "tick (EVERY 1h0m0s, stage a): last "+fmtSlot(hour)+" (message 42), next "+fmtSlot(hour.Add(time.Hour)),
		"(message 43)")
}
