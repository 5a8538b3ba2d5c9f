package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// seedQueue enqueues n messages at stage, sets their status, and returns
// their ids in order.
func seedQueue(t *testing.T, db *pgtest.DB, stage string, status queue.Status, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	ids, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: stage, Payloads: make([][]byte, n)})
	if err != nil {
		t.Fatal(err)
	}
	if status != queue.Pending {
		sqlExec(t, db, `UPDATE pepsi.state SET status = $2,
			timeout = CASE WHEN $2 = 'paused' THEN now() + interval '1 hour' END WHERE id = ANY($1)`, ids, string(status))
	}
	return ids
}

func sqlExec(t *testing.T, db *pgtest.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func stateOf(t *testing.T, db *pgtest.DB, id int64) (stage string, status queue.Status) {
	t.Helper()
	var st string
	if err := db.Pool.QueryRow(context.Background(), "SELECT stage, status FROM pepsi.state WHERE id = $1", id).Scan(&stage, &st); err != nil {
		t.Fatalf("state of %d: %v", id, err)
	}
	return stage, queue.Status(st)
}

// holdDispatcherLock takes the single-dispatcher lock as a running
// dispatcher does, until the test ends.
func holdDispatcherLock(t *testing.T, dsn string) *queue.Listener {
	t.Helper()
	ctx := context.Background()
	l, err := queue.Dial(ctx, dsn, "pepsi_ingress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	if _, err := l.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// fields splits the output into lines of blank-separated fields.
func fields(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// TestQueueSummaryUnconfigured: messages waiting at a stage that the
// configuration lacks (a "0 next:nowhere") are named under the table; done
// and failed ones, and configured stages, are not.
func TestQueueSummaryUnconfigured(t *testing.T) {
	db, dsn := pgtest.New(t)
	conf := env(t, dsn, "[stage-parse]\nPROGRAM = /bin/true\n")
	seedQueue(t, db, "parse", queue.Pending, 2)
	seedQueue(t, db, "nowhere", queue.Pending, 2)
	seedQueue(t, db, "nowhere", queue.Paused, 1)
	seedQueue(t, db, "nowhere", queue.Failed, 4)
	seedQueue(t, db, "gone", queue.Pending, 1)
	seedQueue(t, db, "old", queue.Done, 3)

	r := pepsi(t, "", "queue", "summary")
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := []string{
		"no [stage-gone] in " + conf + ": 1 message waits there, handed to no worker until it is configured",
		"no [stage-nowhere] in " + conf + ": 3 messages wait there, handed to no worker until it is configured",
		"dispatcher: not running",
	}
	// The table: a header, four stages, the totals.
	if len(lines) != 6+len(want) || !slices.Equal(lines[6:], want) {
		t.Fatalf("summary:\n%s\nwant it to end with:\n%s", r.stdout, strings.Join(want, "\n"))
	}
	if f := strings.Fields(lines[2]); f[0] != "nowhere" || f[1] != "2" || f[3] != "1" || f[7] != "4" || f[11] != "in" || !strings.HasPrefix(f[12], "59m") {
		t.Errorf("nowhere's line: %q", lines[2])
	}

	// Without stages in the configuration, no stage is called unconfigured.
	env(t, dsn, "")
	r = pepsi(t, "", "queue", "summary")
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, "no [stage-") {
		t.Errorf("a configuration without stages calls stages unconfigured:\n%s", r.stdout)
	}
}

func TestQueueSummary(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")

	r := pepsi(t, "", "queue")
	r.wantCode(t, 0)
	rows := fields(r.stdout)
	want := [][]string{
		{"STAGE", "pending", "running", "paused", "held", "waiting", "done", "failed", "cancelled", "total", "OLDEST_PENDING", "NEXT_DUE"},
		{"(all)", "0", "0", "0", "0", "0", "0", "0", "0", "0", "-", "-"},
		{"dispatcher:", "not", "running"},
	}
	if !slices.EqualFunc(rows, want, slices.Equal) {
		t.Fatalf("empty queue summary:\n%s", r.stdout)
	}

	young := seedQueue(t, db, "parse", queue.Pending, 3)
	seedQueue(t, db, "parse", queue.Failed, 2)
	seedQueue(t, db, "store", queue.Done, 4)
	seedQueue(t, db, "store", queue.Running, 1)
	seedQueue(t, db, "store", queue.Cancelled, 1)
	old := seedQueue(t, db, "store", queue.Pending, 1)
	sqlExec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '3 hours 5 minutes' WHERE id = $1", old[0])
	// Ages are to the second: "10m00s", or a little more on a slow run.
	sqlExec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '10 minutes' WHERE id = ANY($1)", young)
	l := holdDispatcherLock(t, dsn)

	for _, args := range [][]string{{"queue"}, {"queue", "summary"}} {
		r = pepsi(t, "", args...)
		r.wantCode(t, 0)
		rows = fields(r.stdout)
		want = [][]string{
			want[0],
			{"parse", "3", "0", "0", "0", "0", "0", "2", "0", "5", "10m", "-"},
			{"store", "1", "1", "0", "0", "0", "4", "0", "1", "7", "3h05m", "-"},
			{"(all)", "4", "1", "0", "0", "0", "4", "2", "1", "12", "3h05m", "-"},
		}
		// The age of parse's oldest pending message is 10m and some seconds.
		if len(rows) == 5 && strings.HasPrefix(rows[1][10], "10m") {
			rows[1][10] = "10m"
		}
		if len(rows) != 5 || !slices.EqualFunc(rows[:4], want, slices.Equal) {
			t.Fatalf("%q:\n%s", args, r.stdout)
		}
		if !strings.Contains(r.stdout, "dispatcher: running (pepsi dispatch pid ") || !strings.Contains(r.stdout, "server pid "+strconv.Itoa(int(l.PID()))+")") {
			t.Fatalf("dispatcher line:\n%s", r.stdout)
		}
	}
}

func TestQueueLs(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	pend := seedQueue(t, db, "parse", queue.Pending, 2)
	failed := seedQueue(t, db, "parse", queue.Failed, 1)
	paused := seedQueue(t, db, "store", queue.Paused, 1)
	done := seedQueue(t, db, "store", queue.Done, 1)
	sqlExec(t, db, "UPDATE pepsi.state SET error = 'stage said no\nat line 2', attempts = 2, updated_at = now() - interval '1 hour' WHERE id = $1", failed[0])
	sqlExec(t, db, "UPDATE pepsi.state SET dispatch_error = 'worker crashed: signal: killed' WHERE id = $1", done[0])
	sqlExec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '2 days' WHERE id = ANY($1)", []int64{pend[1], done[0]})
	all := slices.Concat(pend, failed, paused, done)

	r := pepsi(t, "", "queue", "ls")
	r.wantCode(t, 0)
	rows := fields(r.stdout)
	if !slices.Equal(rows[0], []string{"ID", "STAGE", "STATUS", "ATTEMPTS", "PRIO", "KEY", "AGE", "TIMEOUT", "ERROR"}) || len(rows) != 6 {
		t.Fatalf("ls:\n%s", r.stdout)
	}
	for i, id := range all {
		if rows[i+1][0] != strconv.FormatInt(id, 10) {
			t.Fatalf("ls is not in id order:\n%s", r.stdout)
		}
	}
	if got := rows[3]; !slices.Equal(got, []string{strconv.FormatInt(failed[0], 10), "parse", "failed", "2", "0", "-", "1h00m", "-", "stage", "said", "no", "at", "line", "2"}) {
		t.Errorf("failed row %q", got)
	}
	if got := rows[4]; got[7] != "in" || !strings.HasPrefix(got[8], "59m") && !strings.HasPrefix(got[8], "1h00m") {
		t.Errorf("paused row %q: want a timeout in about an hour", got)
	}
	if got := rows[5]; got[6] != "2d00h" || strings.Join(got[8:], " ") != "worker crashed: signal: killed" {
		t.Errorf("done row %q", got)
	}

	for _, tc := range []struct {
		args []string
		want []int64
	}{
		{[]string{"--stage", "parse"}, slices.Concat(pend, failed)},
		{[]string{"--status", "pending"}, pend},
		{[]string{"-s", "store", "--status", "done"}, done},
		{[]string{"--older-than", "1d"}, []int64{pend[1], done[0]}},
		{[]string{"--older-than", "36h", "--status", "done"}, done},
		{[]string{"--older-than", "90"}, []int64{pend[1], failed[0], done[0]}},
		{[]string{"--limit", "2"}, all[:2]},
		{[]string{"-n", "0"}, all},
		{[]string{"--stage", "nowhere"}, nil},
	} {
		if got := lsIDs(t, tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("ls --json %q = %v, want %v", tc.args, got, tc.want)
		}
		// The table lists the same messages.
		r := pepsi(t, "", append([]string{"queue", "ls"}, tc.args...)...)
		r.wantCode(t, 0)
		if n := len(fields(r.stdout)) - 1; n != len(tc.want) {
			t.Errorf("ls %q: %d rows, want %d:\n%s", tc.args, n, len(tc.want), r.stdout)
		}
	}

	// A JSON row carries the whole state.
	r = pepsi(t, "", "queue", "ls", "--json", "--status", "failed")
	var row admin.Row
	if err := json.Unmarshal([]byte(r.stdout), &row); err != nil {
		t.Fatal(err)
	}
	if row.ID != failed[0] || row.Stage != "parse" || row.Status != queue.Failed || row.Attempts != 2 ||
		row.Error == nil || *row.Error != "stage said no\nat line 2" || row.CreatedAt.IsZero() || row.UpdatedAt.IsZero() {
		t.Errorf("JSON row %+v", row)
	}
}

// TestQueueLsPages lists more rows than one query reads. The table's
// columns are sized by the first page; a later, wider cell is printed
// whole.
func TestQueueLsPages(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	ids := seedQueue(t, db, "parse", queue.Pending, 2*lsPage+5)
	wide := ids[lsPage+2]
	sqlExec(t, db, "UPDATE pepsi.state SET stage = 'parse-and-store', status = 'failed', error = 'stage said no to this one', attempts = 1 WHERE id = $1", wide)
	for _, tc := range []struct {
		limit string
		want  []int64
	}{
		{"0", ids},
		{strconv.Itoa(lsPage), ids[:lsPage]},
		{strconv.Itoa(lsPage + 1), ids[:lsPage+1]},
		{strconv.Itoa(10 * lsPage), ids},
	} {
		r := pepsi(t, "", "queue", "ls", "--json", "--limit", tc.limit)
		r.wantCode(t, 0)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if len(lines) != len(tc.want) {
			t.Fatalf("--limit %s: %d lines, want %d", tc.limit, len(lines), len(tc.want))
		}
		for i, line := range lines {
			var row admin.Row
			if err := json.Unmarshal([]byte(line), &row); err != nil || row.ID != tc.want[i] {
				t.Fatalf("--limit %s: line %d = %q (%v), want id %d", tc.limit, i, line, err, tc.want[i])
			}
		}
		table := pepsi(t, "", "queue", "ls", "--limit", tc.limit)
		if n := strings.Count(table.stdout, "\n") - 1; n != len(tc.want) {
			t.Fatalf("table --limit %s: %d rows, want %d", tc.limit, n, len(tc.want))
		}
		if slices.Contains(tc.want, wide) {
			if re := regexp.MustCompile(`(?m)^` + strconv.FormatInt(wide, 10) + ` +parse-and-store +failed +1 .* stage said no to this one$`); !re.MatchString(table.stdout) {
				t.Errorf("table --limit %s: no whole line for message %d", tc.limit, wide)
			}
		}
	}
}

func TestQueueShow(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	ctx := context.Background()
	payload := []byte("bin\x00ary\xff\n")
	id, err := queue.Enqueue(ctx, db.Pool, "parse", payload, map[string]string{"trace": "t-9", "note": "two\nlines"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Admit(ctx); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'failed', error = 'bad input', attempts = 1 WHERE id = $1", id)
	other := seedQueue(t, db, "store", queue.Pending, 1)[0]

	r := pepsi(t, "", "queue", "show", strconv.FormatInt(id, 10), strconv.FormatInt(other, 10))
	r.wantCode(t, 0)
	blocks := strings.Split(r.stdout, "\n\n")
	if len(blocks) != 2 {
		t.Fatalf("show of two messages:\n%s", r.stdout)
	}
	blocks[0] += "\n"
	for _, want := range []string{"id              " + strconv.FormatInt(id, 10) + "\n", "stage           parse\n", "status          failed\n",
		"attempts        1\n", "error           bad input\n", "dispatch_error  -\n", "header note     \"two\\nlines\"\n",
		"header trace    t-9\n", "payload         " + strconv.Itoa(len(payload)) + " bytes\n", "timeout         -\n"} {
		if !strings.Contains(blocks[0], want) {
			t.Errorf("show lacks %q:\n%s", want, blocks[0])
		}
	}
	if !strings.Contains(blocks[1], "headers         -\n") || !strings.Contains(blocks[1], "payload         0 bytes\n") {
		t.Errorf("second message:\n%s", blocks[1])
	}

	r = pepsi(t, "", "queue", "show", "--json", strconv.FormatInt(id, 10))
	r.wantCode(t, 0)
	var m admin.Message
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	if err := json.Unmarshal(m.Headers, &h); err != nil || h["note"] != "two\nlines" || m.ID != id || m.PayloadSize != len(payload) || m.Status != queue.Failed {
		t.Fatalf("show --json = %+v (%v)", m, err)
	}

	r = pepsi(t, "", "queue", "show", "--payload", strconv.FormatInt(id, 10))
	r.wantCode(t, 0)
	if !bytes.Equal([]byte(r.stdout), payload) || r.stderr != "" {
		t.Fatalf("--payload wrote %q, want %q", r.stdout, payload)
	}

	// Nothing is printed unless every id exists.
	r = pepsi(t, "", "queue", "show", strconv.FormatInt(id, 10), "999999")
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi queue show: no such message: 999999")
	if r.stdout != "" {
		t.Errorf("show with a missing id printed:\n%s", r.stdout)
	}
	r = pepsi(t, "", "queue", "show", "-p", "999999")
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi queue show: no such message: 999999")
}

func TestQueueRetry(t *testing.T) {
	db, dsn := pgtest.New(t)
	conf := env(t, dsn, stagesConf)
	failedP := seedQueue(t, db, "parse", queue.Failed, 3)
	failedS := seedQueue(t, db, "store", queue.Failed, 2)
	pend := seedQueue(t, db, "parse", queue.Pending, 1)
	run := seedQueue(t, db, "parse", queue.Running, 1)
	sqlExec(t, db, "UPDATE pepsi.state SET error = 'x', dispatch_error = 'y', attempts = 4 WHERE status = 'failed'")
	id := func(n int64) string { return strconv.FormatInt(n, 10) }

	// A missing id: exit 2, nothing changes.
	r := pepsi(t, "", "queue", "retry", id(failedP[0]), "424242")
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi queue retry: no such message: 424242")
	if _, st := stateOf(t, db, failedP[0]); st != queue.Failed {
		t.Fatalf("retry with a missing id changed %d to %s", failedP[0], st)
	}

	r = pepsi(t, "", "queue", "retry", id(failedP[0]), id(pend[0]))
	r.wantCode(t, 0)
	if r.stdout != "retried 1 message; 1 already pending\n" {
		t.Fatalf("retry by id printed %q", r.stdout)
	}
	var attempts int
	var errText, dispErr *string
	if err := db.Pool.QueryRow(context.Background(), "SELECT attempts, error, dispatch_error FROM pepsi.state WHERE id = $1", failedP[0]).
		Scan(&attempts, &errText, &dispErr); err != nil || attempts != 0 || errText != nil || dispErr != nil {
		t.Fatalf("retried row: attempts %d, error %v, dispatch_error %v (%v)", attempts, errText, dispErr, err)
	}

	// By status and stage, to another stage.
	r = pepsi(t, "", "queue", "retry", "--status", "failed", "--stage", "parse", "--to-stage", "store")
	r.wantCode(t, 0)
	if r.stdout != "retried 2 messages to stage store\n" {
		t.Fatalf("retry --status printed %q", r.stdout)
	}
	for _, x := range failedP[1:] {
		if stage, st := stateOf(t, db, x); stage != "store" || st != queue.Pending {
			t.Fatalf("%d is %s at %s", x, st, stage)
		}
	}
	for _, x := range failedS {
		if _, st := stateOf(t, db, x); st != queue.Failed {
			t.Fatalf("%d of another stage retried", x)
		}
	}
	r = pepsi(t, "", "queue", "retry", "--status", "failed", "--to-stage", "nowhere")
	r.wantCode(t, 2)
	r.wantOneError(t, `pepsi queue retry: --to-stage "nowhere": no [stage-nowhere] in `+conf)

	// Without a dispatcher, a running message is an orphan: retried.
	orphan := seedQueue(t, db, "parse", queue.Running, 1)
	r = pepsi(t, "", "queue", "retry", id(orphan[0]))
	r.wantCode(t, 0)
	if r.stdout != "retried 1 message\n" {
		t.Fatalf("retry of an orphan printed %q", r.stdout)
	}

	// A running message is held while a dispatcher runs: exit 1, untouched.
	l := holdDispatcherLock(t, dsn)
	r = pepsi(t, "", "queue", "retry", id(run[0]), id(failedS[0]))
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi queue retry: left 1 running message alone: held by the running dispatcher (pepsi dispatch pid ")
	if !strings.Contains(r.stderr, "server pid "+strconv.Itoa(int(l.PID()))) {
		t.Errorf("the error does not name the dispatcher's session: %s", r.stderr)
	}
	if r.stdout != "retried 1 message\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	if _, st := stateOf(t, db, run[0]); st != queue.Running {
		t.Fatalf("held message is %s", st)
	}
	r = pepsi(t, "", "queue", "retry", "--status", "running")
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi queue retry: left 1 running message alone: held by the running dispatcher")
	if r.stdout != "retried 0 messages\n" {
		t.Fatalf("retry --status running printed %q", r.stdout)
	}
}

func TestQueuePurge(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	oldDone := seedQueue(t, db, "parse", queue.Done, 4)
	seedQueue(t, db, "parse", queue.Done, 2)
	failed := seedQueue(t, db, "store", queue.Failed, 3)
	pend := seedQueue(t, db, "store", queue.Pending, 2)
	run := seedQueue(t, db, "store", queue.Running, 2)
	sqlExec(t, db, "UPDATE pepsi.state SET updated_at = now() - interval '8 days' WHERE id = ANY($1)", oldDone)
	messages := func() int { return queryInt(t, dsn, "SELECT count(*) FROM pepsi.message") }

	r := pepsi(t, "", "queue", "purge", "--status", "done", "--older-than", "7d", "--dry-run")
	r.wantCode(t, 0)
	if r.stdout != "would purge 4 messages\n" || messages() != 13 {
		t.Fatalf("dry run printed %q, %d messages left", r.stdout, messages())
	}
	r = pepsi(t, "", "queue", "purge", "--status", "done", "--older-than", "7d")
	r.wantCode(t, 0)
	if r.stdout != "purged 4 messages\n" || messages() != 9 {
		t.Fatalf("purge printed %q, %d messages left", r.stdout, messages())
	}
	r = pepsi(t, "", "queue", "purge", "--status", "failed", "--stage", "parse")
	r.wantCode(t, 0)
	if r.stdout != "purged 0 messages\n" {
		t.Fatalf("purge of another stage printed %q", r.stdout)
	}
	r = pepsi(t, "", "queue", "purge", "--status", "failed", "-s", "store")
	r.wantCode(t, 0)
	if r.stdout != "purged 3 messages\n" {
		t.Fatalf("purge failed printed %q", r.stdout)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", failed); n != 0 {
		t.Fatalf("%d purged rows left", n)
	}

	// Live work needs --force.
	for _, st := range []string{"pending", "paused", "running"} {
		r = pepsi(t, "", "queue", "purge", "--status", st)
		r.wantCode(t, 2)
		r.wantOneError(t, "pepsi queue purge: --status "+st+": these messages are live work; purging them needs --force")
	}
	r = pepsi(t, "", "queue", "purge", "--status", "pending", "--force")
	r.wantCode(t, 0)
	if r.stdout != "purged 2 messages\n" {
		t.Fatalf("purge --force printed %q", r.stdout)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", pend); n != 0 {
		t.Fatalf("%d pending rows left", n)
	}

	// Without a dispatcher, running messages are orphans: purged.
	r = pepsi(t, "", "queue", "purge", "--status", "running", "--force")
	r.wantCode(t, 0)
	if r.stdout != "purged 2 messages\n" {
		t.Fatalf("purge of orphans printed %q", r.stdout)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", run); n != 0 {
		t.Fatalf("%d orphans left", n)
	}

	// Running messages of a running dispatcher are refused.
	run = seedQueue(t, db, "store", queue.Running, 2)
	holdDispatcherLock(t, dsn)
	for _, args := range [][]string{{"--dry-run"}, {}} {
		r = pepsi(t, "", append([]string{"queue", "purge", "--status", "running", "--force"}, args...)...)
		r.wantCode(t, 1)
		r.wantOneError(t, "pepsi queue purge: left 2 running messages alone: held by the running dispatcher")
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", run); n != 2 {
		t.Fatalf("held rows deleted: %d left", n)
	}
}

// TestQueueProgress: on a terminal, purge shows its count as it grows.
func TestQueueProgress(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	seedQueue(t, db, "parse", queue.Done, admin.DefaultBatch+1)
	saved := isTerminal
	isTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { isTerminal = saved })
	r := pepsi(t, "", "queue", "purge", "--status", "done")
	r.wantCode(t, 0)
	want := "\rpepsi queue purge: " + strconv.Itoa(admin.DefaultBatch) + " messages\rpepsi queue purge: " + strconv.Itoa(admin.DefaultBatch+1) + " messages\n"
	if r.stdout != "purged "+strconv.Itoa(admin.DefaultBatch+1)+" messages\n" || r.stderr != want {
		t.Fatalf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

func TestQueueBadInput(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "sideways"}, `pepsi queue: unknown queue command "sideways"`},
		{[]string{"queue", "summary", "x"}, `pepsi queue summary: unexpected argument "x"`},
		{[]string{"queue", "ls", "--status", "lost"}, `pepsi queue ls: --status "lost": unknown status`},
		{[]string{"queue", "ls", "--status", ""}, "pepsi queue ls: --status is empty"},
		{[]string{"queue", "ls", "--limit", "-1"}, "pepsi queue ls: --limit -1: want 0 (all) or more"},
		{[]string{"queue", "ls", "--limit", "many"}, `pepsi queue ls: invalid value "many" for flag -limit`},
		{[]string{"queue", "ls", "--older-than", "soon"}, `pepsi queue ls: --older-than "soon": want seconds or a duration`},
		{[]string{"queue", "ls", "--older-than", "-5m"}, `pepsi queue ls: --older-than "-5m"`},
		{[]string{"queue", "ls", "--stage", "a b"}, `pepsi queue ls: --stage "a b": bad stage name (want letters, digits, '_', '-' or '.')`},
		{[]string{"queue", "ls", "--stage", strings.Repeat("s", 64)}, `pepsi queue ls: --stage "` + strings.Repeat("s", 64) + `": bad stage name (want at most 63 bytes, not 64)`},
		{[]string{"queue", "ls", "x"}, `pepsi queue ls: unexpected argument "x"`},
		{[]string{"queue", "show"}, "pepsi queue show: no message ID given"},
		{[]string{"queue", "show", "12x"}, `pepsi queue show: bad message id "12x"`},
		{[]string{"queue", "show", "0"}, `pepsi queue show: bad message id "0"`},
		{[]string{"queue", "show", "-5"}, `pepsi queue show: flag provided but not defined: -5`},
		{[]string{"queue", "show", "5", "--payload"}, `pepsi queue show: "--payload" after a message id: flags come first`},
		{[]string{"queue", "show", "--payload", "5", "6"}, "pepsi queue show: --payload writes one message: give one ID, not 2"},
		{[]string{"queue", "show", "424242"}, "pepsi queue show: no such message: 424242"},
		{[]string{"queue", "retry"}, "pepsi queue retry: give message IDs, or --status failed"},
		{[]string{"queue", "retry", "--status", "failed", "5"}, "pepsi queue retry: give message IDs or --status, not both"},
		{[]string{"queue", "retry", "--stage", "parse", "5"}, "pepsi queue retry: --stage selects messages with --status"},
		{[]string{"queue", "retry", "--status", "pending"}, "pepsi queue retry: --status pending: pending messages are queued already"},
		{[]string{"queue", "retry", "--status", "lost"}, `pepsi queue retry: --status "lost": unknown status`},
		{[]string{"queue", "retry", "424242"}, "pepsi queue retry: no such message: 424242"},
		{[]string{"queue", "retry", "--to-stage", "a/b", "5"}, `pepsi queue retry: --to-stage "a/b"`},
		{[]string{"queue", "purge"}, "pepsi queue purge: --status is required"},
		{[]string{"queue", "purge", "--status", "lost"}, `pepsi queue purge: --status "lost": unknown status`},
		{[]string{"queue", "purge", "--status", "done", "--older-than", "3 days"}, `pepsi queue purge: --older-than "3 days"`},
		{[]string{"queue", "purge", "--status", "done", "x"}, `pepsi queue purge: unexpected argument "x"`},
	} {
		r := pepsi(t, "", tc.args...)
		if r.code != 2 {
			t.Errorf("%q: exit %d, want 2\nstderr: %s", tc.args, r.code, r.stderr)
			continue
		}
		r.wantOneError(t, tc.want)
		if r.stdout != "" {
			t.Errorf("%q wrote to stdout:\n%s", tc.args, r.stdout)
		}
	}
}

func TestParseAge(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0}, {"300", 300 * time.Second}, {"0.5", 500 * time.Millisecond}, {"90m", 90 * time.Minute},
		{"36h", 36 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"1d12h", 36 * time.Hour}, {"1h30m", 90 * time.Minute},
	} {
		if got, err := parseAge("older-than", tc.in); err != nil || got != tc.want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "-1", "-5m", "d", "1d-1h", "7 d", "1w", "1d30", "99999999d", "3x"} {
		if got, err := parseAge("older-than", in); err == nil {
			t.Errorf("parseAge(%q) = %v, want an error", in, got)
		}
	}
}

// TestQueueAlias runs pepsi-queue, a symlink to the binary.
func TestQueueAlias(t *testing.T) {
	bin := binary(t)
	link := filepath.Join(t.TempDir(), "pepsi-queue")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	failed := seedQueue(t, db, "parse", queue.Failed, 2)
	r := exe(t, link, "", "retry", "--status", "failed")
	r.wantCode(t, 0)
	if r.stdout != "retried 2 messages\n" {
		t.Fatalf("pepsi-queue retry printed %q", r.stdout)
	}
	r = exe(t, link, "", "ls", "--json")
	r.wantCode(t, 0)
	if n := strings.Count(r.stdout, "\n"); n != len(failed) {
		t.Fatalf("pepsi-queue ls --json printed %d lines", n)
	}
	r = exe(t, link, "", "show", "0")
	r.wantCode(t, 2)
	r.wantOneError(t, `pepsi queue show: bad message id "0"`)
}

// TestQueueAdmits: with no dispatcher running, pepsi queue sees what
// pepsi.enqueue() wrote: it admits pepsi.ingress before it reads.
func TestQueueAdmits(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	var id int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT pepsi.enqueue('parse', 'x')").Scan(&id); err != nil {
		t.Fatal(err)
	}
	r := pepsi(t, "", "queue", "show", strconv.FormatInt(id, 10))
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "stage           parse\n") || !strings.Contains(r.stdout, "status          pending\n") {
		t.Errorf("queue show of a message enqueued from SQL:\n%s", r.stdout)
	}
	var left int64
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM pepsi.ingress").Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left in pepsi.ingress after pepsi queue (%v)", left, err)
	}
}
