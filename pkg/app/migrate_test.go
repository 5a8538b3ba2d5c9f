package app

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func TestMigrateTwice(t *testing.T) {
	dsn := pgtest.Empty(t)
	env(t, dsn, "")
	ms, err := queue.Migrations()
	if err != nil {
		t.Fatal(err)
	}

	r := pepsi(t, "", "migrate")
	r.wantCode(t, 0)
	if !strings.HasPrefix(r.stdout, "applied 001_schema\n") || strings.Count(r.stdout, "\n") != len(ms)+1 ||
		!strings.Contains(r.stdout, "\ninstalled the functions and triggers of sql/functions (") {
		t.Errorf("first migrate printed %q", r.stdout)
	}
	n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.schema_migration")
	if n != len(ms) {
		t.Errorf("%d rows in schema_migration, want %d", n, len(ms))
	}

	for _, args := range [][]string{{"migrate"}, {"migrate", "up"}} {
		r = pepsi(t, "", args...)
		r.wantCode(t, 0)
		if want := "schema is up to date (version " + itoa(len(ms)) + ")\n"; r.stdout != want {
			t.Errorf("%q again printed %q, want %q", args, r.stdout, want)
		}
		if m := queryInt(t, dsn, "SELECT count(*) FROM pepsi.schema_migration"); m != n {
			t.Errorf("schema_migration went from %d to %d rows", n, m)
		}
	}
}

func TestMigrateStatus(t *testing.T) {
	dsn := pgtest.Empty(t)
	env(t, dsn, "")

	r := pepsi(t, "", "migrate", "status")
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != "VERSION NAME APPLIED" {
		t.Fatalf("status printed:\n%s", r.stdout)
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "1 schema pending" {
		t.Errorf("unmigrated: first row %q", got)
	}
	if f := strings.Fields(lines[len(lines)-1]); len(f) != 4 || f[0] != "-" || f[1] != "functions" || f[3] != "pending" {
		t.Errorf("unmigrated: last row %q, want the functions pending", lines[len(lines)-1])
	}

	pepsi(t, "", "migrate").wantCode(t, 0)
	r = pepsi(t, "", "migrate", "status")
	r.wantCode(t, 0)
	lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if f := strings.Fields(lines[1]); len(f) < 3 || f[0] != "1" || f[1] != "schema" || f[2] == "pending" {
		t.Errorf("migrated: first row %q", lines[1])
	}
	if strings.Contains(r.stdout, "pending") || !strings.HasPrefix(lines[len(lines)-1], "- ") {
		t.Errorf("a migration or the functions still pending after migrate:\n%s", r.stdout)
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing blanks in %q", l)
		}
	}
}

// TestMigrateNewerDatabase: a schema newer than the binary is refused by
// migrate and reported by migrate status, both exit 1.
func TestMigrateNewerDatabase(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	if _, err := db.Pool.Exec(context.Background(), "INSERT INTO pepsi.schema_migration (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	r := pepsi(t, "", "migrate")
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi migrate: database schema is at version 999, newer than this pepsi knows")
	if r.stdout != "" {
		t.Errorf("migrate printed %q", r.stdout)
	}

	r = pepsi(t, "", "migrate", "status")
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi migrate status: database schema is at version 999")
	if !strings.Contains(r.stdout, "schema") {
		t.Errorf("status printed no table:\n%s", r.stdout)
	}

	// enqueue checks the schema too.
	r = pepsi(t, "x", "enqueue", "--stage", "parse")
	r.wantCode(t, 1)
	r.wantOneError(t, "upgrade pepsi")
}

func TestMigrateConnectError(t *testing.T) {
	env(t, "host=/nonexistent-pepsi-socket-dir", "")
	r := pepsi(t, "", "migrate")
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi migrate: connect:")
}

// TestAliasInProcess: pepsi-migrate status is pepsi migrate status.
func TestAliasInProcess(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, "")
	a := runArgv(t, "", []string{"/usr/bin/pepsi-migrate", "status"})
	b := runArgv(t, "", []string{"pepsi", "migrate", "status"})
	a.wantCode(t, 0)
	if a != b || !strings.Contains(a.stdout, "schema") {
		t.Errorf("pepsi-migrate status: %+v\npepsi migrate status: %+v", a, b)
	}
	a = runArgv(t, "", []string{"pepsi-migrate", "--help"})
	b = runArgv(t, "", []string{"pepsi", "migrate", "--help"})
	if a != b || !strings.Contains(a.stdout, "pepsi migrate") {
		t.Errorf("pepsi-migrate --help: %+v\npepsi migrate --help: %+v", a, b)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDSNEnvironment: a PG* variable that pgx reads and cannot parse is
// named, not blamed on the DSN; a bad setting of the DSN itself still is,
// and a setting the DSN gives wins over its variable.
func TestDSNEnvironment(t *testing.T) {
	nowhere := "host=/nonexistent-pepsi-socket-dir"
	for _, tc := range []struct {
		dsn  string
		env  map[string]string
		want string
	}{
		{nowhere, map[string]string{"PGCONNECT_TIMEOUT": "abc"},
			`pepsi migrate status: PGCONNECT_TIMEOUT="abc" in the environment: invalid connect_timeout`},
		{nowhere, map[string]string{"PGCONNECT_TIMEOUT": "-5"},
			`pepsi migrate status: PGCONNECT_TIMEOUT="-5" in the environment: invalid connect_timeout (negative timeout)`},
		{nowhere, map[string]string{"PGPORT": "99999"},
			`pepsi migrate status: PGPORT="99999" in the environment: invalid port`},
		{nowhere, map[string]string{"PGTARGETSESSIONATTRS": "whatever"},
			`pepsi migrate status: PGTARGETSESSIONATTRS="whatever" in the environment: unknown target_session_attrs value: whatever`},
		{"host=127.0.0.1", map[string]string{"PGSSLMODE": "sometimes"},
			`pepsi migrate status: PGSSLMODE="sometimes" in the environment: failed to configure TLS (sslmode is invalid)`},
		// Two variables set, one bad: the bad one is named.
		{nowhere, map[string]string{"PGCONNECT_TIMEOUT": "5", "PGSSLCERTMODE": "maybe"},
			`pepsi migrate status: PGSSLCERTMODE="maybe" in the environment: invalid sslcertmode`},
		// The DSN's own bad setting: the DSN, whatever the variable.
		{nowhere + " connect_timeout=xyz", map[string]string{"PGCONNECT_TIMEOUT": "5"},
			"pepsi migrate status: PEPSI_DSN: cannot parse"},
		{nowhere + " connect_timeout=xyz", map[string]string{"PGCONNECT_TIMEOUT": "abc"},
			"pepsi migrate status: PEPSI_DSN: cannot parse"},
	} {
		env(t, tc.dsn, "")
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		r := pepsi(t, "", "migrate", "status")
		r.wantCode(t, 2)
		r.wantOneError(t, tc.want)
		for k := range tc.env {
			os.Unsetenv(k)
		}
	}
	// A setting the DSN gives wins: the variable is not read, and the DSN
	// gets as far as connecting.
	env(t, nowhere+" connect_timeout=3", "")
	t.Setenv("PGCONNECT_TIMEOUT", "abc")
	r := pepsi(t, "", "migrate", "status")
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi migrate status: connect:")
	// From the file, the variable is named just the same.
	os.Unsetenv("PGCONNECT_TIMEOUT")
	path := env(t, "", "[database]\nDSN = "+nowhere+"\n")
	t.Setenv("PGPORT", "x")
	r = pepsi(t, "", "migrate", "status")
	r.wantCode(t, 2)
	r.wantOneError(t, `pepsi migrate status: PGPORT="x" in the environment: invalid port`)
	if strings.Contains(r.stderr, path) {
		t.Errorf("blamed on the file: %s", r.stderr)
	}
}
