package app

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
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

// TestDoctorScheduleRefused: with `pepsi dispatch` running, a schedule
// whose message the server refuses (here a CHECK constraint on the
// payload: SQLSTATE 23514) holds up no other, and doctor fails it at once,
// pointing at the janitor's log. A slot overdue while a dispatcher holds
// the janitor lock (a schedule not in its pepsi.conf) is not met with
// "start a dispatcher": doctor names the janitor. Once no dispatcher
// runs, it is.
func TestDoctorScheduleRefused(t *testing.T) {
	schedules := "[schedule-p]\nEVERY = 1\nSTAGE = a\nPAYLOAD = poison\n[schedule-q]\nEVERY = 1\nSTAGE = a\n"
	site := ctlSite(t, schedules, "a")
	execSQL(t, site.DSN, "ALTER TABLE pepsi.message ADD CONSTRAINT test_poison CHECK (payload <> 'poison'::bytea)")
	d := startDispatch(t, "dispatcher")
	d.waitLog(`msg="schedule p: the database refused the slot's message; skipped it`, 1)
	testkit.Wait(t, "two of q's messages", time.Minute, func() bool {
		return site.Int64("SELECT count(*) FROM pepsi.state WHERE dedup_key LIKE 'schedule:q:%'") >= 2
	}, d.logs)
	if !strings.Contains(d.logs.String(), "SQLSTATE 23514") || strings.Contains(d.logs.String(), "database: schedule") {
		t.Errorf("the dispatcher's log does not say why p's slot was skipped, or blames the database:\n%s", d.logs)
	}

	run := doctorJSON(t)
	run.want(t, "schedules", statusFail, "the database refused the message of p's slot", ": skipped", `"schedule NAME: …" (p)`,
		"p (EVERY 1s, stage a): last ", " skipped, next ", "q (EVERY 1s, stage a): last ", "(message ")
	if c := run.checks["schedules"]; strings.Contains(c.Action, "start a dispatcher") {
		t.Errorf("schedules: %s: advises starting a dispatcher while one runs", c.line())
	}

	// Schedule r is not in the janitor's pepsi.conf: it was last seen two
	// days ago, and its slot is overdue.
	conf, err := os.ReadFile(site.Path)
	if err != nil {
		t.Fatal(err)
	}
	env(t, site.DSN, string(conf)+"[schedule-r]\nEVERY = 1h\nSTAGE = a\n")
	execSQL(t, site.DSN, "INSERT INTO pepsi.schedule (name, since) VALUES ('r', now() - interval '2 days')")
	run = doctorJSON(t)
	run.want(t, "schedules", statusFail, "not enqueued: r's slot", "though pepsi dispatch pid ", " holds the janitor lock",
		"check that it runs with this ")
	if c := run.checks["schedules"]; strings.Contains(c.Action, "start a dispatcher") {
		t.Errorf("schedules: %s: advises starting a dispatcher while one runs", c.line())
	}

	d.signal(syscall.SIGTERM)
	site.Check()
	run = doctorJSON(t)
	run.want(t, "schedules", statusFail, "not enqueued: r's slot", "no dispatcher holds the janitor lock", "start a dispatcher")
}
