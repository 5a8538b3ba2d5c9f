package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestChaosTerminateSessions ends the dispatcher's server sessions with
// pg_terminate_backend while messages are in flight: its listener (which
// holds the lock), its pool connections, both, and once the workers'
// sessions too. The dispatcher keeps its workers, reconnects, re-takes the
// lock and finishes everything: nothing lost, nothing failed (the stages
// retry what a broken session failed), no pass run twice, statistics equal
// to the rows.
func TestChaosTerminateSessions(t *testing.T) {
	b := setup(t, chaosWith("MAX_RUNTIME = 20"), chaosStages(chaosRetries, chaosRetries, chaosRetries)...)
	f := newFaults(b)
	const total = 400
	payloads := make([]string, total)
	for i := range payloads {
		payloads[i] = through("4ms")
	}
	b.enqueue("parse", payloads...)
	b.start()
	rounds := []struct {
		kind                    string
		listener, pool, workers bool
	}{
		{"terminate listener", true, false, false},
		{"terminate pool", false, true, false},
		{"terminate listener+pool", true, true, false},
		{"terminate every session", true, true, true},
		{"terminate listener+pool", true, true, false},
	}
	done := "SELECT count(*) FROM pepsi.state WHERE status = 'done'"
	for i, r := range rounds {
		b.waitCount("progress", 2*time.Minute, int64((i+1)*total/(len(rounds)+2)), done)
		var s sessions
		b.waitFor("the dispatcher's sessions", time.Minute, func() bool {
			s = b.sessions()
			return s.lock != 0 && len(s.pool) > 0
		})
		workers := b.liveWorkers("")
		reconnects := strings.Count(b.logs.String(), "listener reconnected")
		f.mark(r.kind)
		var kill []int32
		if r.listener {
			kill = append(kill, s.listeners...)
		}
		if r.pool {
			kill = append(kill, s.pool...)
		}
		if r.workers {
			kill = append(kill, s.workers...)
		}
		b.terminate(kill)
		if r.listener {
			b.waitLog("listener reconnected", reconnects+1, time.Minute)
			b.waitFor("the lock taken again", time.Minute, func() bool {
				s2 := b.sessions()
				return s2.lock != 0 && !slices.Contains(kill, s2.lock)
			})
		}
		// The dispatcher kept its workers.
		for _, pid := range workers {
			if !isTestWorker(pid) {
				t.Errorf("round %d (%s): worker %d is gone", i, r.kind, pid)
			}
		}
	}
	if b.count("done") == total {
		t.Fatal("everything finished before the last fault: the test proves nothing")
	}
	b.waitSettled(3 * time.Minute)
	f.log()
	b.checkExplained()
	if n := b.count("failed"); n != 0 {
		t.Errorf("%d messages failed, want none: %v", n, b.failures())
	}
	f.checkDuplicates(true)
	b.checkInvariants()
	if strings.Contains(b.logs.String(), "lost the dispatcher lock") {
		t.Errorf("the dispatcher thought it lost its lock:\n%s", b.logs)
	}
}

// TestChaosReadOnly: the server turns read-only under the dispatcher (as a
// demoted primary does) and back. The dispatcher's statements fail with
// read_only_sql_transaction; it drops its pool so that new connections are
// made, and finishes once the server takes writes again. Without the drop,
// its old read-only sessions would fail for ever.
func TestChaosReadOnly(t *testing.T) {
	b := setup(t, chaosWith("MAX_RUNTIME = 20"), chaosStages(chaosRetries, chaosRetries, chaosRetries)...)
	f := newFaults(b)
	ctx := context.Background()
	var dbname string
	if err := b.db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&dbname); err != nil {
		t.Fatal(err)
	}
	const total = 200
	payloads := make([]string, total)
	for i := range payloads {
		payloads[i] = through("2ms")
	}
	b.enqueue("parse", payloads[:total/2]...)
	b.start()
	b.waitCount("first half done", 2*time.Minute, total/2, "SELECT count(*) FROM pepsi.state WHERE status = 'done'")
	// New sessions are read-only; the dispatcher's pool sessions are ended
	// so that it makes new, read-only ones.
	exec := func(sql string) {
		t.Helper()
		if _, err := b.db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(fmt.Sprintf("ALTER DATABASE %s SET default_transaction_read_only = on", dbname))
	f.mark("read-only server")
	b.terminate(b.sessions().pool)
	b.enqueue("parse", payloads[total/2:]...) // our own session is still writable
	// It fails (read_only_sql_transaction), resets its pool, and fails
	// again with new sessions, for as long as the server is read-only.
	b.waitLog("SQLSTATE 25006", 3, time.Minute)
	if n := b.count("done"); n != total/2 {
		t.Errorf("%d done while the server was read-only, want %d", n, total/2)
	}
	exec(fmt.Sprintf("ALTER DATABASE %s RESET default_transaction_read_only", dbname))
	b.waitSettled(2 * time.Minute)
	f.log()
	b.checkExplained()
	if n := b.count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
	f.checkDuplicates(true)
	b.checkInvariants()
}

// TestChaosPostgresRestart runs against a private cluster that it stops
// and starts: first the dispatcher starts while the server is down (it
// logs, retries, and starts once the server is up), then the server is
// restarted under load. Everything is done, nothing ran twice, the
// statistics equal the rows.
func TestChaosPostgresRestart(t *testing.T) {
	c := newCluster(t)
	t.Setenv("PEPSI_TEST_DSN", c.dsn)
	b := setup(t, chaosWith("MAX_RUNTIME = 20"), chaosStages(chaosRetries, chaosRetries, chaosRetries)...)
	f := newFaults(b)
	const total = 300
	payloads := make([]string, total)
	for i := range payloads {
		payloads[i] = through("10ms")
	}
	b.enqueue("parse", payloads...)

	// The server is down when the dispatcher starts.
	f.mark("server down at start")
	c.stop()
	b.start()
	b.waitLog("database unavailable; retrying", 7, time.Minute)
	if strings.Contains(b.logs.String(), "dispatcher started") {
		t.Fatal("dispatcher started without a server")
	}
	c.start()
	b.waitLog("dispatcher started", 1, time.Minute)
	// The retries back off, with jitter, from RECONNECT_MIN (0.1 s) up to
	// RECONNECT_MAX (1 s) and no further.
	at := logTimes(b.logs.String(), "database unavailable; retrying")
	var longest time.Duration
	for i := 1; i < len(at); i++ {
		longest = max(longest, at[i].Sub(at[i-1]))
	}
	if len(at) < 7 || longest < 400*time.Millisecond || longest > 1500*time.Millisecond {
		t.Errorf("%d retries, longest gap %v: want a backoff growing to RECONNECT_MAX (1s)", len(at), longest)
	}

	// Restart the server under load.
	done := "SELECT count(*) FROM pepsi.state WHERE status = 'done'"
	for i := 1; i <= 2; i++ {
		b.waitCount("progress", 2*time.Minute, int64(i*total/6), done)
		reconnects := strings.Count(b.logs.String(), "listener reconnected")
		workers := b.liveWorkers("")
		f.mark("server restart")
		if n := b.count("done"); n == total {
			t.Fatal("everything finished before the restart: the test proves nothing")
		}
		c.stop()
		b.waitLog("listener: reconnect failed", 1, time.Minute)
		c.start()
		b.waitLog("listener reconnected", reconnects+1, time.Minute)
		for _, pid := range workers {
			if !isTestWorker(pid) {
				t.Errorf("restart %d: worker %d is gone", i, pid)
			}
		}
	}
	b.waitSettledTolerant(3 * time.Minute)
	f.log()
	b.checkExplained()
	if n := b.count("failed"); n != 0 {
		t.Errorf("%d messages failed, want none: %v", n, b.failures())
	}
	f.checkDuplicates(true)
	b.checkInvariants()
}

// logTimes returns the times of the log lines that contain s.
func logTimes(logs, s string) []time.Time {
	var out []time.Time
	for _, l := range strings.Split(logs, "\n") {
		if !strings.Contains(l, s) || !strings.HasPrefix(l, "time=") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			out = append(out, t)
		}
	}
	return out
}
