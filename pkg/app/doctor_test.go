package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// doctorRun is one run of pepsi doctor --json: its exit status and each
// check's result by name.
type doctorRun struct {
	code   int
	status string
	checks map[string]doctorResult
	out    string
}

// doctorJSON runs pepsi doctor --json with args and parses its output.
func doctorJSON(t *testing.T, args ...string) doctorRun {
	t.Helper()
	r := pepsi(t, "", append([]string{"doctor", "--json"}, args...)...)
	var doc struct {
		Status string         `json:"status"`
		Checks []doctorResult `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("pepsi doctor --json: %v (exit %d)\nstdout:\n%s\nstderr:\n%s", err, r.code, r.stdout, r.stderr)
	}
	run := doctorRun{code: r.code, status: doc.Status, checks: map[string]doctorResult{}, out: r.stdout}
	for _, c := range doc.Checks {
		run.checks[c.Check] = c
	}
	if len(doc.Checks) != len(doctorChecks) && run.checks["database"].Check == "" {
		t.Fatalf("%d checks, want %d:\n%s", len(doc.Checks), len(doctorChecks), r.stdout)
	}
	return run
}

// want fails t unless check has status and its message contains each of
// parts.
func (d doctorRun) want(t *testing.T, check, status string, parts ...string) {
	t.Helper()
	c, found := d.checks[check]
	if !found {
		t.Fatalf("no check %q:\n%s", check, d.out)
	}
	if c.Status != status {
		t.Errorf("%s: %s, want %s", check, c.line(), status)
	}
	for _, p := range parts {
		if !strings.Contains(c.line(), p) {
			t.Errorf("%s: %q does not contain %q", check, c.line(), p)
		}
	}
	if (c.Status == statusOK) != (c.Action == "") {
		t.Errorf("%s: %s with action %q: OK has no action, WARN and FAIL have one", check, c.Status, c.Action)
	}
}

// is reports whether check has status and its line contains part.
func (d doctorRun) is(check, status, part string) bool {
	c := d.checks[check]
	return c.Status == status && strings.Contains(c.line(), part)
}

// exec runs sql on the test database.
func execSQL(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// session opens a connection of the test's named app, closed when the test
// ends.
func session(t *testing.T, dsn, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// autovacuumOn reports whether the test server's autovacuum (and
// track_counts) are on: the server is shared, and its setting is not the
// test's to change.
func autovacuumOn(t *testing.T, dsn string) bool {
	return queryInt(t, dsn, "SELECT (current_setting('autovacuum')::bool AND current_setting('track_counts')::bool)::int") == 1
}

// TestDoctorHealthy: with a dispatcher running on a migrated database and
// nothing wrong, every check is OK (autovacuum warns when the test
// server's own is off), the exit status is 0, and the text output is one
// line per check in the order of doctorChecks.
func TestDoctorHealthy(t *testing.T) {
	f := newFaultDB(t, "")
	d := startDispatch(t, "dispatcher")
	d.waitLog("dispatcher started", 1)
	f.enqueue(3, pipeline("1ms"))
	f.WaitSettled(settleTimeout, d.logs)

	run := doctorJSON(t)
	for _, ch := range doctorChecks {
		if ch.name == "autovacuum" && !autovacuumOn(t, f.DSN) {
			run.want(t, ch.name, statusWarn, "the server's autovacuum is off")
			continue
		}
		run.want(t, ch.name, statusOK)
	}
	if run.code != 0 {
		t.Errorf("exit %d, want 0:\n%s", run.code, run.out)
	}
	run.want(t, "schema", statusOK, fmt.Sprintf("version %d, as this pepsi expects", len(mustMigrations(t))))
	run.want(t, "dispatchers", statusOK, "pepsi dispatch pid", "owns every stage", "no standby")
	run.want(t, "locks", statusOK, "database-wide (exclusive)", "janitor", "stage parse", "token")
	run.want(t, "pooler", statusOK, "a direct connection")
	run.want(t, "notify", statusOK, "a NOTIFY on pepsi_ingress came back")
	run.want(t, "connections", statusOK, "PARALLELISM adds up to 6 workers")
	run.want(t, "ingress", statusOK, "empty")

	r := pepsi(t, "", "doctor")
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != len(doctorChecks) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(doctorChecks), r.stdout)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l[6:], doctorChecks[i].name+": ") || (l[:6] != "OK    " && l[:6] != "WARN  ") {
			t.Errorf("line %d %q: want \"OK    %s: …\"", i+1, l, doctorChecks[i].name)
		}
	}
	if want := fmt.Sprintf("OK    schema: version %d, as this pepsi expects", len(mustMigrations(t))); lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
}

func mustMigrations(t *testing.T) []queue.Migration {
	ms, err := queue.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestDoctorDispatchers: no dispatcher → FAIL (exit 1), the wake flag
// never set (a crash) → WARN; a stage with messages and no section → WARN; a stale
// armed wake row → WARN; rows in pepsi.ingress past 2 and 10 ×
// POLL_INTERVAL → WARN, FAIL. Then a dispatcher and a standby start: the
// dispatchers are OK and name the standby, the ingress is admitted, and
// the standby is named as holding back VACUUM once past the threshold.
func TestDoctorDispatchers(t *testing.T) {
	f := newFaultDB(t, "")                                       // POLL_INTERVAL = 2: ingress warns past 4 s, fails past 20 s
	execSQL(t, f.DSN, "ALTER SEQUENCE pepsi.wake_armed RESTART") // as a server crash leaves the unlogged flag
	run := doctorJSON(t)
	run.want(t, "dispatchers", statusFail, "no dispatcher owns stage parse, enrich, deliver: start pepsi dispatch")
	run.want(t, "wake", statusWarn, "never set")
	run.want(t, "stages", statusOK)
	run.want(t, "ingress", statusOK, "empty")
	if run.code != 1 || run.status != statusFail {
		t.Errorf("exit %d, status %s; want 1, FAIL", run.code, run.status)
	}

	execSQL(t, f.DSN, "SELECT pepsi.enqueue('nowhere', 'x')")
	execSQL(t, f.DSN, "SELECT pepsi.enqueue('parse', $1::bytea)", []byte(pipeline("1ms")))
	execSQL(t, f.DSN, "SELECT pepsi.arm('*', true)")
	execSQL(t, f.DSN, "UPDATE pepsi.ingress SET created_at = now() - interval '10 seconds'")
	run = doctorJSON(t)
	run.want(t, "stages", statusWarn, "no [stage-nowhere] in "+f.Path+": 1 message waits there")
	run.want(t, "wake", statusWarn, "armed for set *, which no running dispatcher owns", "SELECT pepsi.arm('*', false)")
	// 10 s old at the UPDATE, a little older when doctor reads it.
	run.want(t, "ingress", statusWarn, "2 messages wait in pepsi.ingress, the oldest for 1", "s (over 2 × POLL_INTERVAL)")
	execSQL(t, f.DSN, "UPDATE pepsi.ingress SET created_at = now() - interval '1 hour'")
	doctorJSON(t).want(t, "ingress", statusFail, "the oldest for 1h00m (over 10 × POLL_INTERVAL)", "start pepsi dispatch")

	d := startDispatch(t, "dispatcher")
	d.waitLog("dispatcher started", 1)
	s := startDispatch(t, "standby", "--standby")
	s.waitLog("standby: waiting for the dispatcher lock", 1)
	testkit.Wait(t, "the parse message done", time.Minute, func() bool { return f.Count("done") == 1 }, d.logs) // nowhere's waits
	// The standby logs before its wait shows in pg_locks.
	testkit.Wait(t, "doctor to name the standby", time.Minute, func() bool {
		run = doctorJSON(t)
		return run.is("dispatchers", statusOK, "1 standby: pepsi dispatch pid")
	}, d.logs, s.logs)
	run.want(t, "dispatchers", statusOK, "owns every stage")
	run.want(t, "locks", statusOK, "(server pid", "standby ")
	run.want(t, "ingress", statusOK, "empty")
	run.want(t, "stages", statusWarn, "no [stage-nowhere]")
	if run.code != 0 {
		t.Errorf("exit %d with a dispatcher running, want 0 (warnings only):\n%s", run.code, run.out)
	}
	// The standby polls for its lock: it holds no snapshot back meanwhile
	// (a wait in one statement did, for as long as it stood by).
	testkit.Wait(t, "the standby to have stood by for a second", time.Minute, func() bool {
		return queryInt(t, f.DSN, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pepsi dispatch pid %' AND backend_start < now() - interval '1 second'") >= 2
	}, d.logs, s.logs)
	doctorJSON(t, "--idle-threshold", "200ms").want(t, "xmin", statusOK, "no session")
}

// TestDoctorSchema: a database without pepsi's schema, one behind the
// binary and one ahead of it all FAIL the schema check.
func TestDoctorSchema(t *testing.T) {
	env(t, pgtest.Empty(t), "")
	run := doctorJSON(t)
	run.want(t, "schema", statusFail, "this database has no pepsi schema: run pepsi migrate")
	run.want(t, "ingress", statusWarn, "not checked")
	run.want(t, "pooler", statusOK)
	if run.code != 1 {
		t.Errorf("exit %d, want 1", run.code)
	}

	_, dsn := pgtest.New(t)
	env(t, dsn, "")
	n := len(mustMigrations(t))
	execSQL(t, dsn, "DELETE FROM pepsi.schema_migration WHERE version = $1", n)
	doctorJSON(t).want(t, "schema", statusFail, fmt.Sprintf("version %d, this pepsi expects %d: run pepsi migrate", n-1, n))
	execSQL(t, dsn, "INSERT INTO pepsi.schema_migration (version, name) VALUES ($1, 'again'), ($2, 'future')", n, n+1)
	run = doctorJSON(t)
	run.want(t, "schema", statusFail, fmt.Sprintf("version %d, newer than this pepsi knows (%d)", n+1, n))
	if run.code != 1 {
		t.Errorf("exit %d, want 1", run.code)
	}
}

// TestDoctorIdleInTransaction: a session idle in a transaction past
// --idle-threshold is named (WARN, exit 0: nothing fails), and no longer
// once it ends its transaction.
func TestDoctorIdleInTransaction(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, "")
	conn := session(t, dsn, "doctor test idle")
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT txid_current()) x").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var run doctorRun
	testkit.Wait(t, "doctor to see the idle transaction", time.Minute, func() bool {
		run = doctorJSON(t, "--idle-threshold", "50ms")
		return run.checks["xmin"].Status == statusWarn
	})
	run.want(t, "xmin", statusWarn, fmt.Sprintf("server pid %d (doctor test idle) idle in transaction for", pid),
		"pg_terminate_backend", "idle_in_transaction_session_timeout")
	if run.code != 0 {
		t.Errorf("exit %d with warnings only, want 0:\n%s", run.code, run.out)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	doctorJSON(t, "--idle-threshold", "50ms").want(t, "xmin", statusOK)

	r := pepsi(t, "", "doctor", "--idle-threshold", "soon")
	r.wantCode(t, 2)
	r.wantOneError(t, `pepsi doctor: --idle-threshold "soon"`)
	pepsi(t, "", "doctor", "extra").wantCode(t, 2)
}

// TestDoctorVacuum: autovacuum off on pepsi.state_live warns (fails with
// VACUUM_INTERVAL = 0); 12 000 dead rows in it warn until a VACUUM.
func TestDoctorVacuum(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, "")
	execSQL(t, dsn, "ALTER TABLE pepsi.state_live SET (autovacuum_enabled = false)")
	doctorJSON(t).want(t, "autovacuum", statusWarn, "autovacuum_enabled = false on pepsi.state_live",
		"ALTER TABLE pepsi.state_live RESET (autovacuum_enabled)")
	env(t, dsn, "[pepsi-dispatch]\nVACUUM_INTERVAL = 0\n")
	run := doctorJSON(t)
	run.want(t, "autovacuum", statusFail, "nothing vacuums the queue")
	if run.code != 1 {
		t.Errorf("exit %d, want 1", run.code)
	}

	// On a connection of its own, which counts its rows in the
	// statistics as it closes (a pooled one may wait 10 s to).
	execSQL(t, dsn, `WITH m AS (INSERT INTO pepsi.message (payload) SELECT '' FROM generate_series(1, 12000) RETURNING id)
		INSERT INTO pepsi.state (id, stage, status) SELECT id, 'x', 'pending' FROM m`)
	// The inserts counted first: a delete counted before them would leave
	// the live rows at 12 000 (the count does not go below 0).
	testkit.Wait(t, "the inserts in the statistics", time.Minute, func() bool {
		return queryInt(t, dsn, "SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'pepsi.state_live'::regclass") == 12000
	})
	execSQL(t, dsn, "DELETE FROM pepsi.state WHERE stage = 'x'")
	testkit.Wait(t, "doctor to see the dead rows", time.Minute, func() bool {
		return doctorJSON(t).is("vacuum", statusWarn, "pepsi.state_live has 12 000 dead rows (no live row)")
	})
	doctorJSON(t).want(t, "vacuum", statusWarn, "run VACUUM (VERBOSE)")
	execSQL(t, dsn, "VACUUM pepsi.state_live")
	testkit.Wait(t, "doctor to see the table vacuumed", time.Minute, func() bool {
		return doctorJSON(t).is("vacuum", statusOK, "vacuumed")
	})
}

// TestDoctorConnections: PARALLELISM past the server's connections fails,
// near them warns, and workers behind WORKER_DSN are not counted.
func TestDoctorConnections(t *testing.T) {
	_, dsn := pgtest.New(t)
	avail := queryInt(t, dsn, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
		- coalesce(current_setting('reserved_connections', true)::int, 0)`)
	env(t, dsn, "[stage-work]\nPROGRAM = /bin/true\nPARALLELISM = 100000\n")
	run := doctorJSON(t)
	run.want(t, "connections", statusFail, fmt.Sprintf("PARALLELISM adds up to 100000 workers, a connection each, and the dispatchers open 6: 100006 connections, more than the server allows (%d: max_connections", avail),
		"lower PARALLELISM")
	if run.code != 1 {
		t.Errorf("exit %d, want 1", run.code)
	}
	env(t, dsn, fmt.Sprintf("[stage-work]\nPROGRAM = /bin/true\nPARALLELISM = %d\n", avail-6-1))
	doctorJSON(t).want(t, "connections", statusWarn, "leaving 1 for everything else")
	conf := fmt.Sprintf("[database]\nWORKER_DSN = %s\n\n[stage-work]\nPROGRAM = /bin/true\nPARALLELISM = 100000\n", dsn)
	env(t, dsn, conf)
	doctorJSON(t).want(t, "connections", statusOK, "the workers connect through WORKER_DSN (not counted)")
}

// TestDoctorLocks: one of pepsi's locks held by a session that is not a
// dispatcher warns, naming it; that session also shows as the stage's
// owner. A configured INGRESS_CHANNEL that is not the recorded one warns.
func TestDoctorLocks(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, "[pepsi-dispatch]\nINGRESS_CHANNEL = elsewhere\n\n[stage-parse]\nPROGRAM = /bin/true\n")
	conn := session(t, dsn, "psql")
	var pid int32
	// (StageLockClass, hashtext(stage)): pkg/queue/locks.go.
	if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid(), pg_advisory_lock(1885696115, hashtext('parse'))").Scan(&pid, nil); err != nil {
		t.Fatal(err)
	}
	run := doctorJSON(t)
	run.want(t, "locks", statusWarn, fmt.Sprintf(`stage parse held by server pid %d ("psql"), a session that is not a pepsi dispatcher's`, pid))
	run.want(t, "dispatchers", statusOK, "psql owns stages parse")
	run.want(t, "notify", statusWarn, "INGRESS_CHANNEL elsewhere in", "set INGRESS_CHANNEL = pepsi_ingress")
}
