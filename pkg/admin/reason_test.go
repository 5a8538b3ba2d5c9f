package admin_test

import (
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// TestReasonIndexed: the failure reason as pkg/admin writes it is the
// expression of sql/028's indexes, word for word as the planner matches
// it, so that a failure group's messages are read through them; and the
// failure groups' trigger and fold (pepsi.failure_counted,
// pepsi.fold_failures) count by the same expression. A copy changed on one side alone fails here, where it would
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
		var plan []string
		rows, err := tx.Query(ctx, "EXPLAIN "+c.query)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if text := strings.Join(plan, "\n"); !strings.Contains(text, " "+c.index+" ") {
			t.Errorf("%s: not read through index %s:\n%s", c.query, c.index, text)
		}
	}
	src := func(fn string) string {
		var s string
		if err := tx.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE oid = $1::regproc`, fn).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, row := range []string{"OLD", "NEW"} {
		r := strings.NewReplacer("(error", "("+row+".error", "(dispatch_error", "("+row+".dispatch_error").Replace(admin.ReasonSQL)
		if !strings.Contains(src("pepsi.failure_counted"), r) {
			t.Errorf("pepsi.failure_counted does not group by %s", r)
		}
	}
	if !strings.Contains(src("pepsi.fold_failures"), admin.ReasonSQL) {
		t.Errorf("pepsi.fold_failures does not group by %s", admin.ReasonSQL)
	}
}
