package metrics

import (
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestJoinGauges: pepsi_queue_waiting_parents and pepsi_queue_open_children
// count a parent waiting at its join stage and its live children.
func TestJoinGauges(t *testing.T) {
	pg, dsn := pgtest.New(t)
	for _, sql := range []string{
		`SELECT setval('pepsi.message_id_seq', 100)`,
		`INSERT INTO pepsi.message (id, payload) VALUES (1, '')`,
		`INSERT INTO pepsi.state (id, stage, status) VALUES (1, 'split', 'running')`,
		`SELECT pepsi.spawn_many(1, 'work', ARRAY['a', 'b', 'c']::bytea[])`,
		`SELECT pepsi.join(1, 'merge')`,
		`UPDATE pepsi.state SET status = 'done' WHERE parent = 1 AND id = (SELECT min(id) FROM pepsi.state WHERE parent = 1)`,
	} {
		if _, err := pg.Pool.Exec(ctx(t), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	src := NewSource(dsn, pgtest.App)
	defer src.Close()
	var out strings.Builder
	if err := WriteStatsText(&out, StatsOptions{Source: src, Stages: []string{"merge"}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`pepsi_queue_waiting_parents{stage="merge"} 1`,
		`pepsi_queue_open_children{stage="merge"} 2`,
		`pepsi_queue_waiting_parents{stage="work"} 0`,
		`pepsi_queue_messages{stage="merge",status="waiting"} 1`,
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
}
