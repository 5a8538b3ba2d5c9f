package app

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The operator's controls on the command line, without a dispatcher:
// pepsi enqueue --at/--delay, pepsi queue pause/resume/hold/release/
// cancel, and what ls, show and the summary say of them. The dispatcher's
// side is in controls_dispatch_test.go.

// rowOf reads a message's status, timeout and error.
func rowOf(t *testing.T, db *pgtest.DB, id int64) (status queue.Status, timeout *time.Time, errText string) {
	t.Helper()
	var st string
	var e *string
	if err := db.Pool.QueryRow(context.Background(), "SELECT status, timeout, error FROM pepsi.state WHERE id = $1", id).
		Scan(&st, &timeout, &e); err != nil {
		t.Fatalf("message %d: %v", id, err)
	}
	if e != nil {
		errText = *e
	}
	return queue.Status(st), timeout, errText
}

// oneID reads the one id an enqueue printed.
func oneID(t *testing.T, r result) int64 {
	t.Helper()
	r.wantCode(t, 0)
	id, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil {
		t.Fatalf("enqueue printed %q", r.stdout)
	}
	return id
}

// TestEnqueueScheduled: --at (RFC 3339 or local) and --delay make paused
// messages due at that time, also with --key and --lines; ls, show and
// the summary say when they run.
func TestEnqueueScheduled(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-parse]\nPROGRAM = /bin/true\n")

	at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	id := oneID(t, pepsi(t, "x", "enqueue", "--stage", "parse", "--at", at.Format(time.RFC3339)))
	if st, to, _ := rowOf(t, db, id); st != queue.Paused || to == nil || !to.Equal(at) {
		t.Errorf("--at %s: %s, timeout %v", at.Format(time.RFC3339), st, to)
	}
	local := time.Now().Add(3 * time.Hour).Truncate(time.Minute)
	id2 := oneID(t, pepsi(t, "x", "enqueue", "--stage", "parse", "--at", local.Format("2006-01-02 15:04")))
	if st, to, _ := rowOf(t, db, id2); st != queue.Paused || to == nil || !to.Equal(local) {
		t.Errorf("--at local %s: %s, timeout %v, want %v", local.Format("2006-01-02 15:04"), st, to, local)
	}
	before := time.Now()
	r := pepsi(t, "a\nb\n", "enqueue", "--stage", "parse", "--delay", "90m", "--lines")
	r.wantCode(t, 0)
	for _, s := range strings.Fields(r.stdout) {
		n, _ := strconv.ParseInt(s, 10, 64)
		if st, to, _ := rowOf(t, db, n); st != queue.Paused || to == nil || to.Before(before.Add(90*time.Minute)) || to.After(time.Now().Add(90*time.Minute)) {
			t.Errorf("--delay 90m: %s, timeout %v", st, to)
		}
	}
	k := oneID(t, pepsi(t, "x", "enqueue", "--stage", "parse", "--key", "daily", "--delay", "1d"))
	if again := oneID(t, pepsi(t, "x", "enqueue", "--stage", "parse", "--key", "daily")); again != k {
		t.Errorf("key of scheduled message %d not held: %d", k, again)
	}
	// --delay 0: now.
	now := oneID(t, pepsi(t, "x", "enqueue", "--stage", "parse", "--delay", "0"))
	if st, to, _ := rowOf(t, db, now); st != queue.Pending || to != nil {
		t.Errorf("--delay 0: %s, timeout %v", st, to)
	}

	r = pepsi(t, "", "queue", "ls", "--status", "paused")
	r.wantCode(t, 0)
	if rows := fields(r.stdout); len(rows) != 6 || rows[1][7] != "in" || !strings.HasPrefix(rows[1][8], "1h59m") {
		t.Errorf("ls of scheduled messages:\n%s", r.stdout)
	}
	r = pepsi(t, "", "queue", "show", strconv.FormatInt(id, 10))
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "timeout         "+fmtTime(at)+" (in 1h59m") {
		t.Errorf("show of a scheduled message:\n%s", r.stdout)
	}
	r = pepsi(t, "", "queue")
	r.wantCode(t, 0)
	if rows := fields(r.stdout); len(rows) < 3 || rows[1][0] != "parse" || rows[1][3] != "5" || rows[1][11] != "in" || !strings.HasPrefix(rows[1][12], "1h29m") {
		t.Errorf("summary: want parse with 5 paused, the next due in 1h29m…:\n%s", r.stdout)
	}
}

// TestEnqueueScheduleBadInput: a time in the past, a negative or
// malformed delay, both flags: one line naming the flag, exit 2, nothing
// enqueued.
func TestEnqueueScheduleBadInput(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	past := time.Now().Add(-time.Minute).Format(time.RFC3339)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--at", past}, `pepsi enqueue: --at "` + past + `": that time is past`},
		{[]string{"--at", "2020-01-01 10:00"}, `pepsi enqueue: --at "2020-01-01 10:00": that time is past`},
		{[]string{"--at", "tomorrow"}, `pepsi enqueue: --at "tomorrow": want RFC 3339`},
		{[]string{"--at", "2030-13-01 10:00"}, `pepsi enqueue: --at "2030-13-01 10:00": want RFC 3339`},
		{[]string{"--delay", "-5s"}, `pepsi enqueue: --delay "-5s": a delay must not be negative`},
		{[]string{"--delay", "-5"}, `pepsi enqueue: --delay "-5": a delay must not be negative`},
		{[]string{"--delay", "soon"}, `pepsi enqueue: --delay "soon": want seconds or a duration`},
		{[]string{"--delay", "5m", "--at", "2030-01-01 10:00"}, "pepsi enqueue: --at and --delay both say when: give one"},
	} {
		r := pepsi(t, "x", append([]string{"enqueue", "--stage", "parse"}, tc.args...)...)
		if r.code != 2 {
			t.Errorf("%q: exit %d, want 2\nstderr: %s", tc.args, r.code, r.stderr)
			continue
		}
		r.wantOneError(t, tc.want)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.message"); n != 0 {
		t.Errorf("%d messages enqueued by bad commands", n)
	}
	_ = db
}

// TestQueueControlsBadInput: each control's usage errors, unknown stages
// and ids: one line, exit 2, nothing changed.
func TestQueueControlsBadInput(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-parse]\nPROGRAM = /bin/true\n")
	ids := seedQueue(t, db, "parse", queue.Pending, 1)
	id := strconv.FormatInt(ids[0], 10)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause"}, "pepsi queue pause: --stage is required"},
		{[]string{"pause", "parse"}, `pepsi queue pause: unexpected argument "parse" (the stage goes with --stage)`},
		{[]string{"pause", "--stage", "nosuch"}, `pepsi queue pause: --stage "nosuch": unknown stage`},
		{[]string{"pause", "--stage", "a b"}, `pepsi queue pause: --stage "a b": bad stage name`},
		{[]string{"pause", "--stage", "parse", "--reason", strings.Repeat("r", 1001)}, "pepsi queue pause: --reason of 1001 bytes"},
		{[]string{"resume"}, "pepsi queue resume: --stage is required"},
		{[]string{"resume", "--stage", "nosuch"}, `pepsi queue resume: --stage "nosuch": unknown stage`},
		{[]string{"hold"}, "pepsi queue hold: give message IDs, or --status pending or paused"},
		{[]string{"hold", "--status", "done"}, "pepsi queue hold: --status done: want pending or paused"},
		{[]string{"hold", "--status", "lost"}, `pepsi queue hold: --status "lost": unknown status`},
		{[]string{"hold", "--status", "pending", id}, "pepsi queue hold: give message IDs or --status, not both"},
		{[]string{"hold", "--stage", "parse", id}, "pepsi queue hold: --stage selects messages with --status"},
		{[]string{"hold", "x1"}, `pepsi queue hold: bad message id "x1"`},
		{[]string{"hold", "424242"}, "pepsi queue hold: no such message: 424242"},
		{[]string{"hold", id, "424242", "424243"}, "pepsi queue hold: no such message: 424242 (and 1 more of the ids given)"},
		{[]string{"release", "--status", "pending"}, "pepsi queue release: --status pending: want held"},
		{[]string{"release", "424242"}, "pepsi queue release: no such message: 424242"},
		{[]string{"cancel"}, "pepsi queue cancel: give message IDs, or --status pending, paused, held or waiting"},
		{[]string{"cancel", "--status", "running"}, "pepsi queue cancel: --status running: want pending, paused, held or waiting"},
		{[]string{"cancel", "--force", "--status", "pending"}, "pepsi queue cancel: --force cancels running messages by ID only"},
		{[]string{"cancel", id, "--force"}, `pepsi queue cancel: "--force" after a message id: flags come first`},
		{[]string{"cancel", "424242"}, "pepsi queue cancel: no such message: 424242"},
		{[]string{"release", "--force", id}, "pepsi queue release: flag provided but not defined: -force"},
	} {
		r := pepsi(t, "", append([]string{"queue"}, tc.args...)...)
		if r.code != 2 {
			t.Errorf("%q: exit %d, want 2\nstderr: %s", tc.args, r.code, r.stderr)
			continue
		}
		r.wantOneError(t, tc.want)
		if r.stdout != "" {
			t.Errorf("%q wrote to stdout:\n%s", tc.args, r.stdout)
		}
	}
	if _, st := stateOf(t, db, ids[0]); st != queue.Pending {
		t.Errorf("message %d is %s after bad commands", ids[0], st)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.paused_stages"); n != 0 {
		t.Errorf("%d stages paused by bad commands", n)
	}
}

// TestQueuePauseCommand: pause records who, when and why (the summary
// says so), a second pause leaves the first, resume ends it; a stage
// known from its messages alone may be paused.
func TestQueuePauseCommand(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-parse]\nPROGRAM = /bin/true\n")
	seedQueue(t, db, "elsewhere", queue.Pending, 1)

	r := pepsi(t, "", "queue", "pause", "--stage", "parse", "--reason", "the API is down")
	r.wantCode(t, 0)
	if r.stdout != "paused stage parse\n" {
		t.Errorf("pause: %q", r.stdout)
	}
	r = pepsi(t, "", "queue", "pause", "--stage", "parse", "--reason", "another")
	r.wantCode(t, 0)
	if !strings.HasPrefix(r.stdout, "stage parse is paused already: paused by "+osUser()+" at ") || !strings.HasSuffix(r.stdout, ": the API is down\n") {
		t.Errorf("second pause: %q", r.stdout)
	}
	pepsi(t, "", "queue", "pause", "--stage", "elsewhere").wantCode(t, 0)
	r = pepsi(t, "", "queue")
	r.wantCode(t, 0)
	for _, want := range []string{
		"stage elsewhere: paused by " + osUser() + " at ",
		"stage parse: paused by " + osUser() + " at ",
		" ago): the API is down\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary does not say %q:\n%s", want, r.stdout)
		}
	}
	r = pepsi(t, "", "queue", "resume", "--stage", "parse")
	r.wantCode(t, 0)
	if !strings.HasPrefix(r.stdout, "resumed stage parse (paused by ") {
		t.Errorf("resume: %q", r.stdout)
	}
	r = pepsi(t, "", "queue", "resume", "--stage", "parse")
	r.wantCode(t, 0)
	if r.stdout != "stage parse was not paused\n" {
		t.Errorf("second resume: %q", r.stdout)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.paused_stages WHERE stage = 'elsewhere'"); n != 1 {
		t.Errorf("elsewhere: %d pauses", n)
	}
}

// TestQueueHoldReleaseCancelCommands: hold and release by id and by
// status, what ls, show and the summary say of held messages, cancel of
// every status (finished ones left as they are, running ones while a
// dispatcher holds them: exit 1, unless --force), and the freed key.
func TestQueueHoldReleaseCancelCommands(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	pend := seedQueue(t, db, "parse", queue.Pending, 3)
	paused := seedQueue(t, db, "parse", queue.Paused, 1)
	done := seedQueue(t, db, "parse", queue.Done, 1)
	run := seedQueue(t, db, "parse", queue.Running, 1)
	idArg := func(ids ...int64) []string {
		var out []string
		for _, id := range ids {
			out = append(out, strconv.FormatInt(id, 10))
		}
		return out
	}

	r := pepsi(t, "", append([]string{"queue", "hold"}, idArg(pend[0], paused[0], done[0])...)...)
	r.wantCode(t, 0)
	if r.stdout != "held 2 messages; 1 not pending or paused, left as it was\n" {
		t.Errorf("hold by id: %q", r.stdout)
	}
	r = pepsi(t, "", "queue", "hold", strconv.FormatInt(run[0], 10))
	r.wantCode(t, 1)
	if r.stdout != "held 0 messages\n" || !strings.Contains(r.stderr, "left 1 running message alone: in a stage's pass") {
		t.Errorf("hold of a running message: %q %q", r.stdout, r.stderr)
	}
	r = pepsi(t, "", "queue", "hold", "--status", "pending", "--stage", "parse")
	r.wantCode(t, 0)
	if r.stdout != "held 2 messages\n" {
		t.Errorf("hold --status pending: %q", r.stdout)
	}
	r = pepsi(t, "", "queue")
	if rows := fields(r.stdout); rows[0][4] != "held" || rows[1][4] != "4" || rows[1][1] != "0" {
		t.Errorf("summary with 4 held:\n%s", r.stdout)
	}
	r = pepsi(t, "", "queue", "ls", "--status", "held")
	if rows := fields(r.stdout); len(rows) != 5 || rows[1][2] != "held" {
		t.Errorf("ls --status held:\n%s", r.stdout)
	}
	r = pepsi(t, "", "queue", "show", strconv.FormatInt(paused[0], 10), strconv.FormatInt(pend[1], 10))
	if !strings.Contains(r.stdout, ", held: paused until then when released\n") || !strings.Contains(r.stdout, "- (held: pending when released)\n") {
		t.Errorf("show of held messages:\n%s", r.stdout)
	}
	// Release one by id, the rest by status: each goes back where it was.
	pepsi(t, "", "queue", "release", strconv.FormatInt(paused[0], 10)).wantCode(t, 0)
	if st, to, _ := rowOf(t, db, paused[0]); st != queue.Paused || to == nil {
		t.Errorf("released paused message: %s, %v", st, to)
	}
	r = pepsi(t, "", "queue", "release", "--status", "held")
	r.wantCode(t, 0)
	if r.stdout != "released 3 messages\n" {
		t.Errorf("release --status held: %q", r.stdout)
	}

	// Cancel: by id (a done one left), by status, a running one.
	k := oneID(t, pepsi(t, "x", "enqueue", "--stage", "parse", "--key", "k1"))
	pepsi(t, "", "queue", "hold", strconv.FormatInt(pend[2], 10)).wantCode(t, 0)
	r = pepsi(t, "", append([]string{"queue", "cancel"}, idArg(pend[0], pend[2], k, done[0])...)...)
	r.wantCode(t, 0)
	if r.stdout != "cancelled 3 messages; 1 not pending, paused, held or waiting, left as it was\n" {
		t.Errorf("cancel by id: %q", r.stdout)
	}
	for _, id := range []int64{pend[0], pend[2], k} {
		if st, to, e := rowOf(t, db, id); st != queue.Cancelled || to != nil || e != admin.CancelReason(osUser()) {
			t.Errorf("cancelled %d: %s, %v, %q", id, st, to, e)
		}
	}
	if again := oneID(t, pepsi(t, "x", "enqueue", "--stage", "parse", "--key", "k1")); again == k {
		t.Errorf("the key of cancelled message %d is not free", k)
	}
	r = pepsi(t, "", "queue", "cancel", "--status", "paused", "--stage", "parse")
	r.wantCode(t, 0)
	if r.stdout != "cancelled 1 message\n" {
		t.Errorf("cancel --status paused: %q", r.stdout)
	}
	// A running message: while no dispatcher runs it is an orphan, and
	// goes; while one runs it stays (exit 1), unless --force.
	run2 := seedQueue(t, db, "parse", queue.Running, 1)
	l := holdDispatcherLock(t, dsn)
	r = pepsi(t, "", "queue", "cancel", strconv.FormatInt(run2[0], 10))
	r.wantCode(t, 1)
	if r.stdout != "cancelled 0 messages\n" || !strings.Contains(r.stderr, "left 1 running message alone: held by the running dispatcher (") ||
		!strings.Contains(r.stderr, "--force cancels it in its pass") {
		t.Errorf("cancel of a held running message: %q %q", r.stdout, r.stderr)
	}
	r = pepsi(t, "", "queue", "cancel", "--force", strconv.FormatInt(run2[0], 10))
	r.wantCode(t, 0)
	if st, _, e := rowOf(t, db, run2[0]); r.stdout != "cancelled 1 message\n" || st != queue.Cancelled || e != admin.CancelReason(osUser()) {
		t.Errorf("cancel --force: %q: %s, %q", r.stdout, st, e)
	}
	l.Close(context.Background())
	r = pepsi(t, "", "queue", "cancel", strconv.FormatInt(run[0], 10))
	r.wantCode(t, 0)
	if st, _, _ := rowOf(t, db, run[0]); r.stdout != "cancelled 1 message\n" || st != queue.Cancelled {
		t.Errorf("cancel of an orphan: %q, %s", r.stdout, st)
	}
}
