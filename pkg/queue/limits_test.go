package queue_test

import (
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The bounds of what the SQL API stores (sql/functions/10_limits.sql).

// TestSQLTimesAfter9999: pepsi.enqueue (p_run_at, p_delay) and
// pepsi.pause refuse a time after the year 9999 with SQLSTATE 22008,
// naming the argument, and store nothing; the last second of 9999 is
// taken.
func TestSQLTimesAfter9999(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	before := count(t, db, "SELECT count(*) FROM pepsi.state")
	for _, tc := range []struct{ sql, arg string }{
		{"SELECT pepsi.enqueue('a', 'x', p_delay => interval '8000 years')", "p_delay 8000 years"},
		{"SELECT pepsi.enqueue('a', 'x', p_delay => interval '200000 years')", "p_delay 200000 years"},
		{"SELECT pepsi.enqueue('a', 'x', p_run_at => '10000-01-01')", "p_run_at 10000-01-01"},
		{"SELECT pepsi.enqueue('a', 'x', p_key => 'k', p_run_at => '12000-06-01 12:00+00')", "p_run_at 12000-06-01"},
		{"SELECT pepsi.enqueue_key('a', 'x', '{}', 0, 'k', '10000-01-01')", "p_run_at 10000-01-01"},
	} {
		_, err := db.Pool.Exec(ctx, tc.sql)
		wantSQLError(t, err, "22008", "pepsi.enqueue: "+tc.arg)
		wantSQLError(t, err, "22008", "after the year 9999")
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state"); n != before {
		t.Errorf("refused enqueues stored %d messages", n-before)
	}
	id := int64SQL(t, db, "SELECT pepsi.enqueue('a', 'x', p_run_at => '9999-12-31 23:59:59+00')")
	if st, timeout, _, _ := ctlState(t, db, id); st != "paused" || timeout == nil || timeout.UTC().Year() != 9999 {
		t.Errorf("run at the end of 9999: %s, timeout %v", st, timeout)
	}

	run := seed1(t, db, "s", queue.Running)
	for _, delay := range []string{"8000 years", "1000000 years"} {
		_, err := db.Pool.Exec(ctx, "SELECT pepsi.pause($1, $2::interval)", run, delay)
		wantSQLError(t, err, "22008", "pepsi.pause: p_delay "+delay+" ends after the year 9999")
		if r := getState(t, db, run); r.Status != queue.Running || r.Timeout != nil {
			t.Errorf("after a refused pause of %s: %+v, want running", delay, r)
		}
	}
	exec(t, db, "SELECT pepsi.pause($1, interval '900 years')", run)
	if r := getState(t, db, run); r.Status != queue.Paused || r.Timeout == nil || r.Timeout.Year() < 2900 {
		t.Errorf("pause of 900 years: %+v", r)
	}
}

// TestSQLFailLongReason: pepsi.fail takes a reason of any length and keeps
// its first 8192 characters, followed by how many bytes it cut; a reason
// of 8192 characters is kept whole, however many bytes they take.
func TestSQLFailLongReason(t *testing.T) {
	t.Parallel()
	db, _, _ := newDB(t)
	long := strings.Repeat("é", 8192) + strings.Repeat("x", 1<<20)
	for _, tc := range []struct{ reason, want string }{
		{long, strings.Repeat("é", 8192) + "… [cut 1048576 bytes]"},
		{strings.Repeat("é", 8192), strings.Repeat("é", 8192)},
		{"bad input", "bad input"},
	} {
		id := seed1(t, db, "s", queue.Running)
		exec(t, db, "SELECT pepsi.fail($1, $2)", id, tc.reason)
		if r := getState(t, db, id); r.Status != queue.Failed || deref(r.Error) != tc.want {
			t.Errorf("fail with a reason of %d bytes: %s, error of %d bytes %.40q…, want %d bytes", len(tc.reason), r.Status,
				len(deref(r.Error)), deref(r.Error), len(tc.want))
		}
	}
}

// TestSQLControlTexts: pepsi.pause_stage refuses a reason of more than
// 1000 bytes and a p_by of more than 255, pepsi.cancel such a p_by, each
// with SQLSTATE 22023 naming the argument, and change nothing; the
// limits themselves are taken.
func TestSQLControlTexts(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	_, err := db.Pool.Exec(ctx, "SELECT pepsi.pause_stage('a', $1, 'x')", strings.Repeat("r", 1200000))
	wantSQLError(t, err, "22023", "pepsi.pause_stage: p_reason of 1200000 bytes: want at most 1000")
	_, err = db.Pool.Exec(ctx, "SELECT pepsi.pause_stage('a', 'why', $1)", strings.Repeat("u", 256))
	wantSQLError(t, err, "22023", "pepsi.pause_stage: p_by of 256 bytes: want at most 255")
	if n := count(t, db, "SELECT count(*) FROM pepsi.paused_stages"); n != 0 {
		t.Fatalf("refused pauses left %d paused stages", n)
	}
	exec(t, db, "SELECT pepsi.pause_stage('a', $1, $2)", strings.Repeat("r", 1000), strings.Repeat("u", 255))
	if n := count(t, db, "SELECT count(*) FROM pepsi.paused_stages WHERE octet_length(reason) = 1000"); n != 1 {
		t.Errorf("a reason of 1000 bytes: %d paused stages with it", n)
	}

	id := seed1(t, db, "s", queue.Pending)
	_, err = db.Pool.Exec(ctx, "SELECT pepsi.cancel($1, $2)", []int64{id}, strings.Repeat("u", 300))
	wantSQLError(t, err, "22023", "pepsi.cancel: p_by of 300 bytes: want at most 255")
	if r := getState(t, db, id); r.Status != queue.Pending {
		t.Errorf("after a refused cancel: %+v", r)
	}
	if n := int64SQL(t, db, "SELECT pepsi.cancel($1, $2)", []int64{id}, strings.Repeat("u", 255)); n != 1 {
		t.Errorf("cancel by a name of 255 bytes: %d cancelled", n)
	}
}
