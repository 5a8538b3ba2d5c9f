package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// flowLog records every status change of pepsi.state, by the server's
// clock: which message was where, when. An UPDATE that makes a row done or
// failed moves it to another partition, which fires INSERT row triggers
// there, not UPDATE ones.
const flowLog = `
CREATE TABLE test_flow (seq bigserial, id bigint, stage text, old text, new text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION test_flow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO test_flow (id, stage, old, new) VALUES (NEW.id, NEW.stage, NULL, NEW.status);
    ELSE
        INSERT INTO test_flow (id, stage, old, new) VALUES (NEW.id, NEW.stage, OLD.status, NEW.status);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER test_flow AFTER UPDATE ON pepsi.state FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION test_flow();
CREATE TRIGGER test_flow_moved AFTER INSERT ON pepsi.state FOR EACH ROW
    WHEN (NEW.status IN ('done', 'failed')) EXECUTE FUNCTION test_flow()`

// TestKeyOrder: with KEY_LIMIT = 1 the messages of one key pass the stage
// one at a time in ingress order, through worker crashes, timeouts, failed
// passes retried later (a paused retry holds its key's place), a stage's
// own pause and a dispatcher restart; messages without the header pass
// freely. Each message's time at the stage is from its first claim to its
// end (done or failed): per key, those spans must not overlap and must come
// in id order.
func TestKeyOrder(t *testing.T) {
	b := setup(t, fast+"\nMAX_RUNTIME = 1",
		"k\nPARALLELISM = 3\nQUEUE_LIMIT = 2\nKEY = header:customer\nRETRIES = 2\nRETRY_DELAY = 0.2\nRETRY_DELAY_MAX = 0.4")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := b.db.Pool.Exec(ctx, flowLog); err != nil {
		t.Fatal(err)
	}
	// The keys are only set when the dispatcher starts: messages enqueued
	// before that are keyed by its start.
	b.start()
	b.waitFor("the stage's KEY written", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.flow_keys WHERE stage = 'k' AND header = 'customer' AND key_limit = 1") == 1
	})
	const keys, perKey = 6, 7
	faults := []string{"k=crashonce:", "k=hangonce:", "k=exit:1", "k=pauseonce:200ms", "k=garbageonce:"}
	failed := map[int64]bool{}
	for i := 0; i < keys*perKey; i++ {
		key := fmt.Sprintf("c%d", i%keys)
		payload := "@sleep=10ms k=finish"
		if i%4 == 1 {
			payload = "@sleep=5ms " + faults[(i/4)%len(faults)]
		}
		var id int64
		if err := b.db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue('k', $1::bytea, jsonb_build_object('customer', $2::text))",
			[]byte(payload), key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if payload == "@sleep=5ms k=exit:1" {
			failed[id] = true
		}
		if i%7 == 3 {
			b.enqueue("k", "@sleep=5ms k=finish") // no header: no key
		}
	}
	total := int64(keys*perKey + keys*perKey/7)
	// A restart halfway: the stop puts running rows back, the new start
	// finds the keys as they were.
	b.waitFor("a third done", 2*time.Minute, func() bool { return b.count("done") >= total/3 })
	if err := b.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	b.start()
	b.waitFor("every message finished", 3*time.Minute, func() bool {
		return b.count("done")+b.count("failed") == total
	})
	if n := b.count("failed"); n != int64(len(failed)) {
		t.Errorf("%d failed, want %d (the exit:1 messages)", n, len(failed))
	}
	b.checkInvariants()

	type span struct {
		ID         int64
		Key        *string
		Start, End time.Time
	}
	rows, err := b.db.Pool.Query(ctx, `
		SELECT f.id, m.headers ->> 'customer', min(f.at) FILTER (WHERE f.new = 'running'), max(f.at) FILTER (WHERE f.new IN ('done', 'failed'))
		  FROM test_flow f JOIN pepsi.message m USING (id)
		 GROUP BY f.id, m.headers ORDER BY 3`)
	if err != nil {
		t.Fatal(err)
	}
	spans, err := pgx.CollectRows(rows, pgx.RowToStructByPos[span])
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(spans)) != total {
		t.Fatalf("%d messages in the log, want %d", len(spans), total)
	}
	last := map[string]span{}
	order := map[string][]int64{}
	for _, s := range spans {
		if s.Key == nil {
			continue
		}
		k := *s.Key
		if p, ok := last[k]; ok {
			if !p.End.Before(s.Start) {
				t.Errorf("key %s: message %d claimed at %s, while %d was still at the stage (until %s)",
					k, s.ID, s.Start.Format("15:04:05.000000"), p.ID, p.End.Format("15:04:05.000000"))
			}
		}
		last[k] = s
		order[k] = append(order[k], s.ID)
	}
	for k, ids := range order {
		if !slices.IsSorted(ids) || len(ids) != perKey {
			t.Errorf("key %s passed as %v, want %d messages in id order", k, ids, perKey)
		}
	}
	// The retries and the stage's pause did happen, and held their key.
	if n := b.int64("SELECT count(*) FROM test_flow WHERE new = 'paused'"); n < int64(keys) {
		t.Errorf("%d pauses, want at least %d", n, keys)
	}
	if t.Failed() {
		b.showLogs()
	}
}
