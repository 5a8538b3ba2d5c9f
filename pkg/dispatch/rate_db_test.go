package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimTimes records, for every claim of a row, the claim's own
// transaction time (now(): after the dispatcher counted the tokens, before
// it took them).
const claimTimes = `
CREATE TABLE test_claims (id bigint, at timestamptz);
CREATE FUNCTION test_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_claims VALUES (NEW.id, now());
    RETURN NULL;
END $$;
CREATE TRIGGER test_claimed AFTER UPDATE ON pepsi.state FOR EACH ROW
    WHEN (OLD.status = 'pending' AND NEW.status = 'running') EXECUTE FUNCTION test_claimed()`

// TestRate: a stage with RATE = 100/s and a full queue hands out, in no
// window of time, more than its burst (one second's worth) plus 100 a
// second, by the claims' own timestamps; a stage without RATE beside it
// is not held back, and every message is done. POLL_INTERVAL is an hour:
// a stage left out for want of tokens and then forgotten would wait for
// it, and the test would time out.
func TestRate(t *testing.T) {
	b := setup(t, "POLL_INTERVAL = 1h\nSTATS_INTERVAL = 60\nWORKER_IDLE_TIMEOUT = 30\nSHUTDOWN_GRACE = 5",
		"limited\nPARALLELISM = 2\nQUEUE_LIMIT = 4\nRATE = 100/s",
		"free\nPARALLELISM = 1\nQUEUE_LIMIT = 4")
	if _, err := b.db.Pool.Exec(context.Background(), claimTimes); err != nil {
		t.Fatal(err)
	}
	const n, rate, burst = 400, 100, 100
	limited := make([]string, n)
	for i := range limited {
		limited[i] = "limited=finish"
	}
	b.enqueue("limited", limited...)
	b.enqueue("free", limited[:n/2]...)
	b.start()
	b.waitFor("every message done", 3*time.Minute, func() bool { return b.count("done") == n+n/2 })
	b.checkInvariants()

	// A message claimed and given back (not run) took no token: only each
	// message's last claim, the one it was handed out by, counts.
	rows, err := b.db.Pool.Query(context.Background(), `SELECT max(c.at) FROM test_claims c JOIN pepsi.state s USING (id)
		WHERE s.stage = 'limited' GROUP BY c.id ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	at, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	if len(at) != n {
		t.Fatalf("%d messages claimed at the limited stage, want %d", len(at), n)
	}
	// For every window from one claim to a later one: at most the burst
	// plus the rate over the window (and 2 for the clocks: the bucket
	// counts on the dispatcher's, the timestamps are the server's).
	worst, worstAt := 0.0, ""
	for i := range at {
		for j := i; j < len(at); j++ {
			w := at[j].Sub(at[i])
			got := float64(j - i + 1)
			limit := burst + rate*w.Seconds() + 2
			if got-limit > worst {
				worst, worstAt = got-limit, strings.Join([]string{at[i].Format("15:04:05.000000"), w.String()}, " + ")
			}
		}
	}
	if worst > 0 {
		t.Errorf("%.0f more than burst + rate × window handed out in the window %s", worst, worstAt)
	}
	t.Logf("%d messages at RATE = %d/s claimed over %v", n, rate, at[n-1].Sub(at[0]))
}
