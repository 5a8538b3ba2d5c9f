package dispatch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestShortPause: messages a stage pauses with a delay of 0 or 5 ms come
// back and finish; none is claimed again before the pass that paused it
// is settled (which judged the new pass's running row as a pass that did
// not move its message, and failed it).
func TestShortPause(t *testing.T) {
	for _, delay := range []string{"0", "5ms"} {
		t.Run(delay, func(t *testing.T) {
			b := setup(t, fast, "work\nPARALLELISM = 2\nQUEUE_LIMIT = 4")
			const n = 300
			ps := make([]string, n)
			for i := range ps {
				ps[i] = "work=pauseonce:" + delay
			}
			b.enqueue("work", ps...)
			b.start()
			b.waitSettled(2 * time.Minute)
			b.checkInvariants()
			if got := b.count("done"); got != n {
				t.Errorf("%d of %d done; failed: %d, e.g. %q", got, n, b.count("failed"),
					b.text("SELECT coalesce(min(dispatch_error), '') FROM pepsi.state WHERE status = 'failed'"))
			}
			if got := b.int64("SELECT resumed FROM pepsi.dispatch_stats"); got != n {
				t.Errorf("resumed = %d, want %d", got, n)
			}
		})
	}
}

// TestLongKey: a message whose KEY header is far longer than an index
// entry may be (a JWT, a URL) costs nothing but its own key's order: it is
// keyed by the value's hash, claimed and finished; the other messages of
// that key still wait for it, and the keyless stage beside it flows.
func TestLongKey(t *testing.T) {
	b := setup(t, fast, "k\nPARALLELISM = 2\nKEY = header:acct", "free\nPARALLELISM = 2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := b.db.Pool.Exec(ctx, flowLog); err != nil {
		t.Fatal(err)
	}
	b.start()
	b.waitFor("the stage's KEY written", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.flow_keys WHERE stage = 'k'") == 1
	})
	long := strings.Repeat("eyJhbGciOiJSUzI1NiJ9.", 400) // 8 400 bytes, incompressible enough
	for i := range 6 {
		key := long
		if i%2 == 1 {
			key = fmt.Sprintf("short%d", i)
		}
		if _, err := b.db.Pool.Exec(ctx, "SELECT pepsi.enqueue('k', '@sleep=5ms k=finish'::bytea, jsonb_build_object('acct', $1::text))", key); err != nil {
			t.Fatalf("enqueue with a key of %d bytes: %v", len(key), err)
		}
	}
	b.enqueue("free", "free=finish", "free=finish", "free=finish")
	b.waitSettled(2 * time.Minute)
	b.checkInvariants()
	if got := b.count("done"); got != 9 {
		t.Errorf("%d of 9 done", got)
	}
	if got := b.text("SELECT coalesce(string_agg(DISTINCT flow_key, ','), '') FROM pepsi.state WHERE octet_length(flow_key) > 100"); got != "" {
		t.Errorf("a key stored as long as its header: %.80s…", got)
	}
	// The long key's three messages passed one at a time, in order.
	var overlaps int64
	err := b.db.Pool.QueryRow(ctx, `
		WITH span AS (
		    SELECT f.id, min(f.at) FILTER (WHERE f.new = 'running') AS a, max(f.at) FILTER (WHERE f.new = 'done') AS z
		      FROM test_flow f JOIN pepsi.message m ON m.id = f.id
		     WHERE m.headers ->> 'acct' = $1 GROUP BY f.id)
		SELECT count(*) FROM span x JOIN span y ON x.id < y.id WHERE NOT (x.z <= y.a)`, long).Scan(&overlaps)
	if err != nil {
		t.Fatal(err)
	}
	if overlaps != 0 {
		t.Errorf("%d pairs of the long key's messages overlapped or passed out of order", overlaps)
	}
}

// text runs a query that returns one string.
func (b *bundle) text(sql string, args ...any) string {
	b.t.Helper()
	var s string
	if err := b.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	return s
}
