package admin_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// TestReasonIndexed: the failure reason as pkg/admin writes it is the
// expression of sql/028's indexes, word for word as the planner matches
// it, so that a failure group's messages are read through them; and the
// failure groups' trigger (pepsi.failure_counted) counts by the same
// expression. (The recount in the DO block of
// sql/functions/20_failure_groups.sql is one more copy, which no catalog
// keeps.) A copy changed on one side alone fails here, where it would
// otherwise only turn the dashboard's reads into scans.
func TestReasonIndexed(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ index, query string }{
		{"state_failed_group", `SELECT id FROM pepsi.state_failed WHERE ` + admin.ReasonSQL + ` = 'x' AND stage = 's'`},
		{"state_failed_group_at", `SELECT id FROM pepsi.state_failed
		  WHERE stage = 's' AND (` + admin.ReasonSQL + ` COLLATE "C") = 'x' ORDER BY updated_at DESC, id DESC LIMIT 5`},
	} {
		rows, err := tx.Query(ctx, "EXPLAIN "+c.query)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if text := strings.Join(plan, "\n"); !strings.Contains(text, " "+c.index+" ") {
			t.Errorf("%s: not read through index %s:\n%s", c.query, c.index, text)
		}
	}
	var src string
	if err := tx.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE oid = 'pepsi.failure_counted'::regproc`).Scan(&src); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"OLD", "NEW"} {
		r := strings.NewReplacer("(error", "("+row+".error", "(dispatch_error", "("+row+".dispatch_error").Replace(admin.ReasonSQL)
		if !strings.Contains(src, r) {
			t.Errorf("pepsi.failure_counted does not group by %s", r)
		}
	}
}
