package app

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// notRunStage answers 75 (not run) to every message, for ever.
const notRunStage = `#!/bin/sh
while read id; do echo "75 # x"; done
`

// TestNotRunSeen: a stage that answers 75 for ever is seen (issue 47):
// the message carries the reason (pepsi queue ls and show) with no
// attempt counted and no history,
// the stage's not_run counts the answers in pepsi stats and its
// Prometheus text, and the dispatcher's metrics, one log line at info says so however many answers
// come within the minute, and pepsi doctor warns.
func TestNotRunSeen(t *testing.T) {
	bin := binary(t)
	db, dsn := pgtest.New(t)
	stage := filepath.Join(t.TempDir(), "tempfail.sh")
	if err := os.WriteFile(stage, []byte(notRunStage), 0o755); err != nil {
		t.Fatal(err)
	}
	env(t, dsn, "[pepsi-dispatch]\nSTATS_INTERVAL = 1\nSHUTDOWN_GRACE = 5\nMETRICS_LISTEN = 127.0.0.1:0\n\n[stage-a]\nPROGRAM = "+stage+"\nPARALLELISM = 1\n")
	ctx := context.Background()
	ids, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: [][]byte{nil}})
	if err != nil {
		t.Fatal(err)
	}
	id := ids[0]

	disp := startChild(t, bin, "dispatch")
	logs := disp.logs

	const reason = "stage a answered 75: not run, not counted as an attempt: x"
	notRun := func() int64 {
		var n int64
		_ = db.Pool.QueryRow(ctx, "SELECT coalesce(sum(not_run), 0)::bigint FROM pepsi.stage_stats WHERE stage = 'a'").Scan(&n)
		return n
	}
	testkit.Wait(t, "three answers 75 counted", time.Minute, func() bool { return notRun() >= 3 }, logs)
	testkit.Wait(t, "the message paused with its reason and no attempt", time.Minute, func() bool {
		var status, derr string
		var attempts int
		err := db.Pool.QueryRow(ctx, "SELECT status, attempts, coalesce(dispatch_error, '') FROM pepsi.state WHERE id = $1", id).
			Scan(&status, &attempts, &derr)
		return err == nil && status == "paused" && attempts == 0 && derr == reason
	}, logs)
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.history"); n != 0 {
		t.Errorf("%d history rows: an answer 75 is no failed pass", n)
	}
	// pepsi queue shows the reason beside the message.
	if r := pepsi(t, "", "queue", "ls", "--stage", "a"); r.code != 0 || !strings.Contains(r.stdout, "stage a answered 75: not run") {
		t.Errorf("pepsi queue ls: exit %d, no reason:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := pepsi(t, "", "queue", "show", strconv.FormatInt(id, 10)); r.code != 0 || !strings.Contains(r.stdout, reason) {
		t.Errorf("pepsi queue show: exit %d, no reason:\n%s%s", r.code, r.stdout, r.stderr)
	}

	// pepsi stats: the column, in the table, the JSON and the metrics.
	r := pepsi(t, "", "stats")
	r.wantCode(t, 0)
	if !regexp.MustCompile(`(?m)^STAGE .*\bnot_run\b`).MatchString(r.stdout) {
		t.Errorf("pepsi stats: no not_run column:\n%s", r.stdout)
	}
	r = pepsi(t, "", "stats", "--format", "json")
	r.wantCode(t, 0)
	var snap struct {
		Stages []queue.StageStats `json:"stages"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil || len(snap.Stages) != 1 || snap.Stages[0].NotRun < 3 ||
		snap.Stages[0].Processed+snap.Stages[0].Failed != 0 {
		t.Errorf("pepsi stats --format json: %+v (%v), want stage a with not_run ≥ 3 and no pass:\n%s", snap.Stages, err, r.stdout)
	}
	r = pepsi(t, "", "stats", "--format", "prometheus")
	r.wantCode(t, 0)
	if m := regexp.MustCompile(`(?m)^pepsi_stage_not_run_total\{stage="a"\} ([0-9]+)$`).FindStringSubmatch(r.stdout); m == nil || m[1] == "0" {
		t.Errorf("pepsi stats --format prometheus: no pepsi_stage_not_run_total for a above 0:\n%s", r.stdout)
	}

	// The dispatcher's own metrics count them as a result of their own.
	var addr string
	testkit.Wait(t, "the metrics address", time.Minute, func() bool {
		m := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`).FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, logs)
	if v := sample(t, scrapeMetrics(t, "http://"+addr), "pepsi_stage_results_total", "stage", "a", "result", "not_run"); v < 3 {
		t.Errorf("pepsi_stage_results_total{a, not_run} = %v, want at least 3", v)
	}

	// pepsi doctor warns, naming the stage.
	doc := doctorJSON(t)
	doc.want(t, "not_run", statusWarn, "stage a answered 75 (not run) in ", "tried again every second")

	// One log line at info, however many answers came within the minute.
	lines := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "stage answered 75") {
			lines++
			for _, want := range []string{"level=INFO", "stage=a", "id=" + strconv.FormatInt(id, 10), "answers=1"} {
				if !strings.Contains(l, want) {
					t.Errorf("log line lacks %q: %s", want, l)
				}
			}
		}
	}
	if lines != 1 {
		t.Errorf("%d log lines of answers 75 for %d answers, want 1:\n%s", lines, notRun(), logs)
	}

	disp.stop(t)
	testkit.CheckInvariants(t, db)
}
