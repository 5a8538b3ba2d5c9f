package dispatch

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestAnalyzeCheck: with the server's autovacuum off for pepsi's tables,
// the analyze check analyzes what a bulk load changed (the partitions that
// hold the rows, and the partitioned tables above them, which autovacuum
// never analyzes), leaves a table whose rows did not change alone when it
// checks again, and analyzes again only what changed enough since.
func TestAnalyzeCheck(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.New(t)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	int64Of := func(sql string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := db.Pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	exec(`DO $$ DECLARE r record; BEGIN
	        FOR r IN SELECT relname FROM pg_class WHERE relnamespace = 'pepsi'::regnamespace AND relkind = 'r' LOOP
	            EXECUTE format('ALTER TABLE pepsi.%I SET (autovacuum_enabled = false)', r.relname);
	        END LOOP; END $$`)
	payloads := slices.Repeat([][]byte{[]byte(`{"x":1}`)}, 5000)
	if _, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "a", Payloads: payloads}); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE pepsi.state SET status = CASE WHEN id % 50 = 0 THEN 'failed' ELSE 'done' END WHERE id % 10 <> 0`)
	// The writers' statistics reach the server's within a second or so.
	testkit.Wait(t, "the load counted in pg_stat_user_tables", time.Minute, func() bool {
		return int64Of(`SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relid IN
		                  (SELECT relid FROM pg_partition_tree('pepsi.state') WHERE isleaf)`) >= 5000+4500
	})

	a := newAnalyzer(db.DB, slog.New(slog.DiscardHandler))
	a.gap, a.every, a.next = 0, 0, time.Time{}
	if err := a.check(ctx); err != nil {
		t.Fatal(err)
	}
	analyzed := func() map[string]int64 {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT relname, analyze_count FROM pg_stat_user_tables WHERE schemaname = 'pepsi'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			out[name] = n
		}
		return out
	}
	first := analyzed()
	for _, table := range []string{"state", "state_done", "message", "state_live", "state_failed", "state_done_default"} {
		if first[table] == 0 {
			t.Errorf("pepsi.%s not analyzed after the load: %v", table, first)
		}
	}
	for _, table := range []string{"state", "message", "state_done_default", "state_live"} {
		if n := int64Of(`SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass`, "pepsi."+table); n <= 0 {
			t.Errorf("pepsi.%s: reltuples %d after the analyze check", table, n)
		}
	}
	if first["history"] != 0 || first["ingress"] != 0 {
		t.Errorf("pepsi.history and pepsi.ingress, empty and never changed, analyzed: %v", first)
	}

	// Checked again, nothing changed: nothing analyzed.
	if err := a.check(ctx); err != nil {
		t.Fatal(err)
	}
	if again := analyzed(); !maps.Equal(again, first) {
		t.Errorf("analyzed again with nothing changed: %v, then %v", first, again)
	}

	// 400 done messages failed: past the threshold of pepsi.state (50 +
	// 10 % of 5 000), whose ANALYZE analyzes every partition of it (as
	// PostgreSQL 15 does), and of pepsi.failure_delta (their 400 deltas,
	// schema 28); not of pepsi.message, unchanged.
	exec(`UPDATE pepsi.state SET status = 'failed' WHERE id IN (SELECT id FROM pepsi.state_done ORDER BY id LIMIT 400)`)
	testkit.Wait(t, "the change counted in pg_stat_user_tables", time.Minute, func() bool {
		return int64Of(`SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = 'pepsi.state_failed'::regclass`) >= 400
	})
	if err := a.check(ctx); err != nil {
		t.Fatal(err)
	}
	then := analyzed()
	for table, n := range then {
		want := first[table]
		if table == "state" || strings.HasPrefix(table, "state_") || table == "failure_delta" {
			want++
		}
		if n != want {
			t.Errorf("pepsi.%s analyzed %d times, want %d (all: %v, before: %v)", table, n, want, then, first)
		}
	}
}

// TestAnalyzeLeavesAutovacuum: a table the server's autovacuum analyzes
// is left to it however much it changed; a partitioned table never is.
func TestAnalyzeLeavesAutovacuum(t *testing.T) {
	a := newAnalyzer(nil, slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		s    queue.Staleness
		want bool
	}{
		{queue.Staleness{Table: "pepsi.state_live", Autovacuum: true, Threshold: 50, Changed: 1e6}, false},
		{queue.Staleness{Table: "pepsi.state_live", Threshold: 50, Changed: 51}, true},
		{queue.Staleness{Table: "pepsi.state_live", Threshold: 50, Changed: 50}, false},
		{queue.Staleness{Table: "pepsi.message", Partitioned: true, Threshold: 50, Live: 1000}, true},
		{queue.Staleness{Table: "pepsi.state", Partitioned: true, Threshold: 50}, false},
	} {
		if got := a.due(&tc.s); got != tc.want {
			t.Errorf("%+v: due %v, want %v", tc.s, got, tc.want)
		}
	}
}
