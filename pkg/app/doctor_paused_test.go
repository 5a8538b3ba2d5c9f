package app

import (
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestDoctorPaused: the paused check lists each paused stage with who
// paused it, when and why, its pending messages and those that arrived
// since the pause (admitted or still in pepsi.ingress; not those pending
// before it). It is OK while a pause is young and little arrives; it warns
// once one is older than --paused-threshold (1h) or --paused-backlog
// (1000) messages have arrived since, with the command that resumes it;
// bad thresholds are usage errors.
func TestDoctorPaused(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-a]\nPROGRAM = /bin/true\n[stage-b]\nPROGRAM = /bin/true\n")
	doctorJSON(t).want(t, "paused", statusOK, "no stage is paused")

	seedQueue(t, db, "b", queue.Pending, 1) // before b's pause
	pepsi(t, "", "queue", "pause", "--stage", "a", "--reason", "deploy").wantCode(t, 0)
	pepsi(t, "", "queue", "pause", "--stage", "b").wantCode(t, 0)
	seedQueue(t, db, "a", queue.Pending, 2)
	execSQL(t, dsn, "SELECT pepsi.enqueue('a', 'x'), pepsi.enqueue('b', 'y')")
	by := osUser()

	run := doctorJSON(t)
	run.want(t, "paused", statusOK, "stage a paused by "+by+" at ", " ago): deploy; 3 pending there, 3 arrived since the pause",
		"stage b paused by "+by+" at ", "; 2 pending there, 1 arrived since the pause",
		"(warns once paused for longer than 1h00m, or once 1 000 have arrived since)")

	run = doctorJSON(t, "--paused-backlog", "3")
	run.want(t, "paused", statusWarn, "deploy; 3 pending there, 3 arrived since the pause (piling up: 3 or more); stage b ",
		"nothing ends a pause by itself: once the stage may run again, pepsi queue resume --stage a")
	if c := run.checks["paused"]; strings.Contains(c.Action, "--stage b") || strings.Contains(c.Message, "1 arrived since the pause (") {
		t.Errorf("paused: %s: warns of b, which is neither long nor piling up", c.line())
	}

	execSQL(t, dsn, "UPDATE pepsi.paused_stages SET paused_at = now() - interval '2 hours' WHERE stage = 'b'")
	run = doctorJSON(t)
	run.want(t, "paused", statusWarn, "stage b paused by "+by, " (2h00m ago); 2 pending there, 2 arrived since the pause (paused for longer than 1h00m)",
		"once the stage may run again, pepsi queue resume --stage b")
	if c := run.checks["paused"]; strings.Contains(c.Action, "--stage a") {
		t.Errorf("paused: %s: warns of a", c.line())
	}
	doctorJSON(t, "--paused-threshold", "3h").want(t, "paused", statusOK, "or once 1 000 have arrived since")

	r := pepsi(t, "", "doctor", "--paused-backlog", "0")
	r.wantCode(t, exitUsage)
	r.wantOneError(t, `--paused-backlog "0": want a positive integer`)
	r = pepsi(t, "", "doctor", "--paused-threshold", "soon")
	r.wantCode(t, exitUsage)
	r.wantOneError(t, `--paused-threshold "soon": want seconds or a duration`)

	pepsi(t, "", "queue", "resume", "--stage", "a").wantCode(t, 0)
	pepsi(t, "", "queue", "resume", "--stage", "b").wantCode(t, 0)
	doctorJSON(t).want(t, "paused", statusOK, "no stage is paused")
}
