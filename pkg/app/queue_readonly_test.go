package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// readerRole creates a login role that may read the schema pepsi of db
// (USAGE and SELECT), dropped when t ends, with default_transaction_read_only
// on when readOnly, and returns the DSN of dsn's database as that role.
func readerRole(t *testing.T, db *pgtest.DB, dsn string, readOnly bool) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "pepsi_test_reader_" + hex.EncodeToString(b[:])
	sqlExec(t, db, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := db.Pool.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	sqlExec(t, db, "GRANT USAGE ON SCHEMA pepsi TO "+role)
	sqlExec(t, db, "GRANT SELECT ON ALL TABLES IN SCHEMA pepsi TO "+role)
	if readOnly {
		sqlExec(t, db, "ALTER ROLE "+role+" SET default_transaction_read_only = on")
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " user=" + role
	}
	q := u.Query()
	q.Set("user", role)
	u.RawQuery = q.Encode()
	u.User = nil
	return u.String()
}

// TestQueueReadOnly: a role that may only read (a read-only session, or
// SELECT grants alone) looks at the queue while a message waits in
// pepsi.ingress and no dispatcher runs: the summary and ls answer, exit 0,
// and name the message as enqueued, not yet admitted, which it stays.
// A role that may write admits it, and the line goes.
func TestQueueReadOnly(t *testing.T) {
	db, dsn := pgtest.New(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := db.Pool.Exec(ctx, `SELECT pepsi.enqueue('a', 'x')`); err != nil {
			t.Fatal(err)
		}
	}
	ingress := func() int { return queryInt(t, dsn, "SELECT count(*)::int FROM pepsi.ingress") }
	if n := ingress(); n != 2 {
		t.Fatalf("%d messages in pepsi.ingress, want 2", n)
	}
	const line = "stage a: 2 pending messages enqueued, not yet admitted (in pepsi.ingress until a dispatcher admits them)"
	for _, readOnly := range []bool{true, false} {
		env(t, readerRole(t, db, dsn, readOnly), "")
		r := pepsi(t, "", "queue")
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "\n"+line+"\n") || r.stderr != "" {
			t.Errorf("read-only %v: summary:\n%s%s\nwant the line %q", readOnly, r.stdout, r.stderr, line)
		}
		if f := fields(r.stdout); len(f) < 2 || f[1][0] != "a" || f[1][1] != "2" {
			t.Errorf("read-only %v: summary does not count them pending at a:\n%s", readOnly, r.stdout)
		}
		for _, args := range [][]string{{"queue", "ls"}, {"queue", "ls", "--json", "--stage", "a", "--status", "pending"}} {
			r = pepsi(t, "", args...)
			r.wantCode(t, 0)
			if want := "pepsi queue ls: not listed: " + line + "\n"; r.stderr != want {
				t.Errorf("read-only %v: %q: stderr %q, want %q", readOnly, args, r.stderr, want)
			}
		}
		r = pepsi(t, "", "queue", "ls", "--status", "done")
		r.wantCode(t, 0)
		if r.stderr != "" {
			t.Errorf("read-only %v: ls --status done: stderr %q", readOnly, r.stderr)
		}
		if n := ingress(); n != 2 {
			t.Fatalf("read-only %v: %d messages in pepsi.ingress, want 2", readOnly, n)
		}
	}

	// The owner admits them.
	env(t, dsn, "")
	r := pepsi(t, "", "queue")
	r.wantCode(t, 0)
	if strings.Contains(r.stdout, "enqueued") {
		t.Errorf("summary after the admit:\n%s", r.stdout)
	}
	if n := ingress(); n != 0 {
		t.Errorf("%d messages in pepsi.ingress after the owner's summary, want 0", n)
	}
	if n := queryInt(t, dsn, "SELECT count(*)::int FROM pepsi.state WHERE stage = 'a' AND status = 'pending'"); n != 2 {
		t.Errorf("%d pending at a, want 2", n)
	}
}

// TestQueueSummaryConfigured: a configured stage without messages keeps
// its line, with zeros, as on the dashboard.
func TestQueueSummaryConfigured(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-zeta]\nPROGRAM = /bin/true\n\n[stage-alpha]\nPROGRAM = /bin/true\n")
	seedQueue(t, db, "mid", "pending", 1)
	r := pepsi(t, "", "queue")
	r.wantCode(t, 0)
	f := fields(r.stdout)
	want := [][]string{
		{"alpha", "0", "0", "0", "0", "0", "0", "0", "0", "0", "-", "-"},
		{"mid", "1", "0", "0", "0", "0", "0", "0", "0", "1"},
		{"zeta", "0", "0", "0", "0", "0", "0", "0", "0", "0", "-", "-"},
	}
	if len(f) < 5 {
		t.Fatalf("summary:\n%s", r.stdout)
	}
	for i, w := range want {
		if got := f[1+i]; len(got) < len(w) || strings.Join(got[:len(w)], " ") != strings.Join(w, " ") {
			t.Errorf("line %d %q, want it to start with %q\n%s", i+1, got, w, r.stdout)
		}
	}
}
