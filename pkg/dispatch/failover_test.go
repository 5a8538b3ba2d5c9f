package dispatch

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestFailover: a primary and a synchronous streaming standby on this
// machine; the dispatcher and its stage programs (the test worker, and the
// Go SDK's example stage at enrich) use a multi-host DSN (the old primary
// first, target_session_attrs=read-write) with the default configuration
// (no RETRIES). Under load the primary crashes (an
// immediate stop) and the standby is promoted: the dispatcher and the
// workers carry on against the new primary, no committed message is lost,
// none is left running, every one ends done. Then the old primary comes
// back as a standby of the new one: a read-write connection refuses it,
// the dispatcher's reconnections pass it by, and the work goes on.
func TestFailover(t *testing.T) {
	var nodes []*pgNode
	base := newFailoverBase(t, &nodes)
	a := newPrimary(t, base, "node_a", &nodes)
	b := newStandby(t, base, "node_b", a, &nodes)
	// Commits wait for the standby: a move the dispatcher saw committed
	// survives the failover. The standby's copy of the configuration has
	// no synchronous_standby_names, so that once promoted (with no standby
	// of its own) its commits do not wait for one.
	a.exec("ALTER SYSTEM SET synchronous_standby_names = 'node_b'")
	a.exec("SELECT pg_reload_conf()")
	waitNode(t, a, "node_b a synchronous standby of node_a", func() bool {
		var state string
		err := a.query("postgres", "SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE application_name = 'node_b'", &state)
		return err == nil && state == "sync"
	})

	t.Setenv("PEPSI_TEST_DSN", multiHost("postgres", a, b))
	// enrich is the Go SDK's example stage (pkg/worker), parse and
	// deliver the test worker.
	sdk := testkit.Build(t, "github.com/pepsi-dev/pepsi/contrib/go/stage")
	bn := setup(t, "MAX_RUNTIME = 20", chaosStages("", "PROGRAM = "+sdk+" --next deliver", "")...)
	var db string
	if err := bn.db.Pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(bn.cfg.DSN, ","+strconv.Itoa(b.port)) || bn.cfg.StageDSN() != bn.cfg.DSN {
		t.Fatalf("the dispatcher's DSN %q is not the multi-host one", bn.cfg.DSN)
	}
	// When each message became running, by the server's clock.
	if _, err := bn.db.Pool.Exec(context.Background(), `
		CREATE TABLE test_claims (id bigint, stage text, at timestamptz);
		CREATE FUNCTION test_claimed() RETURNS trigger LANGUAGE plpgsql AS
			$$BEGIN INSERT INTO test_claims VALUES (NEW.id, NEW.stage, clock_timestamp()); RETURN NULL; END$$;
		CREATE TRIGGER test_claimed AFTER UPDATE ON pepsi.state_live FOR EACH ROW
			WHEN (NEW.status = 'running' AND OLD.status IS DISTINCT FROM 'running') EXECUTE FUNCTION test_claimed()`); err != nil {
		t.Fatal(err)
	}
	newFaults(bn) // the dispatcher's log when the test fails

	const total = 600
	payloads := make([]string, total)
	for i := range payloads {
		payloads[i] = through("10ms")
	}
	ids := bn.enqueue("parse", payloads...)
	bn.start()
	done := "SELECT count(*) FROM pepsi.state WHERE status = 'done'"
	bn.waitCount("progress", 2*time.Minute, total/4, done)
	if n := bn.count("done"); n == total {
		t.Fatal("everything finished before the failover: the test proves nothing")
	}

	// The failover: node_a crashes; node_b is promoted once the
	// dispatcher has found no server that takes writes (node_a down,
	// node_b read-only), as a failover manager would, having seen node_a
	// gone.
	failures := strings.Count(bn.logs.String(), "listener: reconnect failed")
	crash := time.Now()
	a.stopImmediate(true)
	bn.waitLog("listener: reconnect failed", failures+1, time.Minute)
	promote := time.Now()
	b.must("promote", "pg_ctl", "promote", "-D", b.data(), "-w", "-t", "60")
	promoted := time.Now()
	var ro bool
	if err := b.query("postgres", "SELECT pg_is_in_recovery()", &ro); err != nil || ro {
		t.Fatalf("node_b after pg_ctl promote: in recovery %v, %v", ro, err)
	}

	first := firstAfter(bn, b, db, "test_claims", "a claim on the new primary", promote)
	firstPass := firstAfter(bn, b, db, "test_passes", "a stage pass on the new primary", promote)
	bn.waitSettledTolerant(3 * time.Minute)
	settled := time.Now()

	var left, doneN, failedN int64
	if err := bn.db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM unnest($1::bigint[]) AS i(id) WHERE NOT EXISTS (SELECT 1 FROM pepsi.state s WHERE s.id = i.id)),
		(SELECT count(*) FROM pepsi.state WHERE status = 'done'),
		(SELECT count(*) FROM pepsi.state WHERE status = 'failed')`, ids).Scan(&left, &doneN, &failedN); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of the %d committed messages are lost", left, total)
	}
	if failedN != 0 {
		t.Errorf("%d messages failed, want none: %v", failedN, bn.failures())
	}
	if doneN != total {
		t.Errorf("%d done, want %d", doneN, total)
	}
	if n := bn.int64("SELECT count(*) FROM pepsi.message WHERE headers->>'enrich' = 'go'"); n != total {
		t.Errorf("%d messages passed the SDK's enrich stage, want %d", n, total)
	}
	var passes, repeated, reclaims int64
	if err := bn.db.Pool.QueryRow(context.Background(), `SELECT count(*), count(*) - count(DISTINCT (id, stage)),
		(SELECT count(*) - count(DISTINCT (id, stage)) FROM test_claims) FROM test_passes`).Scan(&passes, &repeated, &reclaims); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: crash to promoted %v (pg_ctl promote %v); promotion to the first claim on the new primary %v, to its first stage pass %v; crash to the first claim %v; all %d done %v after the promotion; %d failed, %d lost; %d passes of the test worker's stages, %d repeated; %d claims again at the same stage (passes given back); %d listener reconnections, %d workers started",
		promoted.Sub(crash).Round(time.Millisecond), promoted.Sub(promote).Round(time.Millisecond),
		first.Sub(promote).Round(time.Millisecond), firstPass.Sub(promote).Round(time.Millisecond),
		first.Sub(crash).Round(time.Millisecond), doneN, settled.Sub(promote).Round(time.Millisecond),
		failedN, left, passes, repeated, reclaims,
		strings.Count(bn.logs.String(), "listener reconnected"), strings.Count(bn.logs.String(), `msg="worker started"`))

	// The old primary comes back, as a standby of the new one.
	a.rejoin(b)
	waitNode(t, b, "node_a streaming from node_b", func() bool {
		var n int64
		err := b.query("postgres", "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'node_a' AND state = 'streaming'", &n)
		return err == nil && n == 1
	})
	if err := a.query("postgres", "SELECT pg_is_in_recovery()", &ro); err != nil || !ro {
		t.Fatalf("node_a back: in recovery %v, %v; want a standby", ro, err)
	}
	// It is refused: a read-write connection to it alone fails, and the
	// multi-host DSN, which lists it first, lands on node_b.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if conn, err := pgx.Connect(ctx, multiHost(db, a)); err == nil {
		conn.Close(ctx)
		t.Error("a read-write connection to the old primary alone succeeded")
	} else {
		t.Logf("a read-write connection to the old primary alone: %v", err)
	}
	if port := serverPort(t, ctx, bn.cfg.DSN); port != b.port {
		t.Errorf("the dispatcher's DSN connects to port %d, want node_b's %d", port, b.port)
	}
	lis, err := queue.Dial(ctx, bn.cfg.DSN, "pepsi_failover_probe")
	if err != nil {
		t.Fatalf("queue.Dial on the multi-host DSN: %v", err)
	}
	if err := lis.Ping(ctx); err != nil {
		t.Errorf("the listener session on the multi-host DSN: %v, want the primary", err)
	}
	lis.Close(ctx)

	// Every session of the dispatcher and its workers is ended: each
	// reconnects, trying node_a first, and must pass it by.
	reconnects := strings.Count(bn.logs.String(), "listener reconnected")
	s := bn.sessions()
	ended := time.Now()
	bn.terminate(append(append(s.listeners, s.pool...), s.workers...))
	bn.waitLog("listener reconnected", reconnects+1, 2*time.Minute)
	relistened := time.Since(ended)
	const more = 100
	payloads = payloads[:more]
	bn.enqueue("parse", payloads...)
	bn.waitSettledTolerant(3 * time.Minute)
	if n := bn.count("done"); n != total+more {
		t.Errorf("%d done after the old primary came back, want %d", n, total+more)
	}
	if n := bn.count("failed"); n != 0 {
		t.Errorf("%d failed after the old primary came back: %v", n, bn.failures())
	}
	// The pepsi sessions are on node_b; node_a, still a standby, has all
	// the new primary wrote (it follows it) and no session of pepsi's.
	var bLSN string
	if err := b.query("postgres", "SELECT pg_current_wal_lsn()::text", &bLSN); err != nil {
		t.Fatal(err)
	}
	waitNode(t, a, "node_a replaying node_b's WAL", func() bool {
		var caught bool
		err := a.query("postgres", "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", &caught, bLSN)
		return err == nil && caught
	})
	var onA int64
	if err := a.query(db, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND (application_name LIKE 'pepsi%' OR application_name LIKE 'testworker%')`, &onA); err != nil {
		t.Fatal(err)
	}
	if onA != 0 {
		t.Errorf("%d sessions of the dispatcher or its workers on the old primary", onA)
	}
	if err := a.query("postgres", "SELECT pg_is_in_recovery()", &ro); err != nil || !ro {
		t.Errorf("node_a at the end: in recovery %v, %v; want a standby", ro, err)
	}
	var doneOnA int64
	if err := a.query(db, "SELECT count(*) FROM pepsi.state WHERE status = 'done'", &doneOnA); err != nil {
		t.Fatal(err)
	}
	if doneOnA != total+more {
		t.Errorf("node_a has %d done, want %d (replicated from node_b)", doneOnA, total+more)
	}
	t.Logf("old primary back as a standby: every session of pepsi's ended, the listener reconnected past it to node_b in %v; %d more done there, replicated to node_a, which has no session of pepsi's",
		relistened.Round(time.Millisecond), more)
	bn.checkAfterOutage()
}

// waitNode waits for cond, a check of a node (tolerant of its errors),
// failing with the node's server log after a minute and a half.
func waitNode(t *testing.T, n *pgNode, what string, cond func() bool) {
	t.Helper()
	testkit.Wait(t, what, 90*time.Second, cond, nodeLog{n})
}

// nodeLog shows a node's server log in a failure message.
type nodeLog struct{ n *pgNode }

func (l nodeLog) String() string { return l.n.serverLog() }

// firstAfter waits for the first row of table (test_claims, test_passes)
// on node n after since, and returns when it was, by the server's clock.
func firstAfter(bn *bundle, n *pgNode, db, table, what string, since time.Time) time.Time {
	bn.t.Helper()
	var first time.Time
	bn.waitFor(what, 2*time.Minute, func() bool {
		var at *time.Time
		err := n.query(db, "SELECT min(at) FROM "+table+" WHERE at > $1", &at, since)
		if err == nil && at != nil {
			first = *at
		}
		return at != nil
	})
	return first
}

// serverPort is the port of the server a connection on dsn reaches.
func serverPort(t *testing.T, ctx context.Context, dsn string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect on %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var port int
	if err := conn.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
		t.Fatal(err)
	}
	return port
}
