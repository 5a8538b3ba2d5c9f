package queue_test

import (
	"slices"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestTracedClaim: a traced turn's claim reads each message's attempt and
// trace context, keyed stages too; an untraced one reads neither.
func TestTracedClaim(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	with, err := queue.Enqueue(ctx, db.Pool, "a", nil, map[string]string{"traceparent": tp, "tracestate": "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"})
	if err != nil {
		t.Fatal(err)
	}
	without, err := queue.Enqueue(ctx, db.Pool, "a", nil, map[string]string{"customer": "c1"})
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := queue.Enqueue(ctx, db.Pool, "k", nil, map[string]string{"traceparent": tp, "customer": "c1"})
	if err != nil {
		t.Fatal(err)
	}
	var res queue.TurnResult
	caps := []queue.StageCap{{Stage: "a", Cap: 10}, {Stage: "k", Cap: 10, KeyLimit: 1}}
	if err := db.RunTurn(ctx, queue.Turn{Admit: true, Caps: caps, Pass: 1 << 41, Traced: true}, &res); err != nil {
		t.Fatal(err)
	}
	got := map[int64]queue.Claimed{}
	for _, c := range res.Claimed {
		got[c.ID] = c
	}
	if c := got[with]; c.Attempt != 1 || c.Trace != tp+" congo=t61rcWkgMzE, rojo=00f067aa0ba902b7" {
		t.Errorf("claimed with a trace context: attempt %d, trace %q", c.Attempt, c.Trace)
	}
	if c := got[without]; c.Attempt != 1 || c.Trace != "" {
		t.Errorf("claimed without: attempt %d, trace %q", c.Attempt, c.Trace)
	}
	if c := got[keyed]; c.Attempt != 1 || c.Trace != tp || c.Waited <= 0 {
		t.Errorf("claimed at a keyed stage: attempt %d, trace %q, waited %v", c.Attempt, c.Trace, c.Waited)
	}
	// Untraced: the same claim reads no header.
	if _, err := db.Pool.Exec(ctx, "UPDATE pepsi.state SET status = 'pending'"); err != nil {
		t.Fatal(err)
	}
	if err := db.RunTurn(ctx, queue.Turn{Caps: caps, Pass: 1<<41 + 1}, &res); err != nil {
		t.Fatal(err)
	}
	ids := []int64{}
	for _, c := range res.Claimed {
		ids = append(ids, c.ID)
		if c.Attempt != 0 || c.Trace != "" {
			t.Errorf("untraced claim of %d: attempt %d, trace %q", c.ID, c.Attempt, c.Trace)
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int64{with, without, keyed}) {
		t.Errorf("claimed %v, want %v", ids, []int64{with, without, keyed})
	}
}

// TestSpawnInheritsTrace: children made without a traceparent of their
// own get their parent's trace context; one that brings its own keeps it.
func TestSpawnInheritsTrace(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	own := "00-11111111111111111111111111111111-2222222222222222-00"
	parent := seed1(t, db, "a", queue.Running)
	if _, err := db.Pool.Exec(ctx, `UPDATE pepsi.message SET headers = jsonb_build_object('traceparent', $2::text, 'tracestate', 'k=v', 'x', 'y') WHERE id = $1`, parent, tp); err != nil {
		t.Fatal(err)
	}
	plain := seed1(t, db, "a", queue.Running)
	var one, mine, bare int64
	err := db.Pool.QueryRow(ctx, `SELECT pepsi.spawn($1, 'b', '', '{"c": "1"}'), pepsi.spawn($1, 'b', '', jsonb_build_object('traceparent', $2::text)), pepsi.spawn($3, 'b')`,
		parent, own, plain).Scan(&one, &mine, &bare)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pepsi.spawn_many($1, 'b', ARRAY['x', 'y']::bytea[])`, parent); err != nil {
		t.Fatal(err)
	}
	headers := func(where string, args ...any) []string {
		rows, err := db.Pool.Query(ctx, `SELECT m.headers::text FROM pepsi.message m JOIN pepsi.state s USING (id) WHERE `+where+` ORDER BY id`, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var hs []string
		for rows.Next() {
			var h string
			if err := rows.Scan(&h); err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		return hs
	}
	inherited := `{"tracestate": "k=v", "traceparent": "` + tp + `"}`
	want := []string{`{"c": "1", "tracestate": "k=v", "traceparent": "` + tp + `"}`, `{"traceparent": "` + own + `"}`, inherited, inherited}
	if got := headers("s.parent = $1", parent); !slices.Equal(got, want) {
		t.Errorf("children's headers:\n got %q\nwant %q", got, want)
	}
	if got := headers("s.id = $1", bare); !slices.Equal(got, []string{"{}"}) {
		t.Errorf("a child of a message without a trace context: %q", got)
	}
}
