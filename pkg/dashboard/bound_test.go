package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestBoundActions: an action on a list's filter takes exactly the
// messages its confirmation counted, while a producer adds matching
// messages between the confirmation and the action (and during it): not
// one of the new ones; and of the confirmed ones, one finished meanwhile
// and one purged are left alone and counted, by what they are now. Each
// bulk action (cancel, hold, release, retry, purge), by a search's filter
// and by status and stage alone (the filter pepsi queue takes); a second
// post of the confirmation shows its result and does not act again; a
// confirmation posted with another filter is refused.
func TestBoundActions(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"notify", "other"}})
	pool, err := pgxpool.New(ctx(t), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, c := range []struct {
		kind, status, after string // the action, the status it takes, and what it leaves
		header              bool
	}{
		{"cancel", "pending", "cancelled", true},
		{"cancel", "pending", "cancelled", false},
		{"hold", "pending", "held", true},
		{"release", "held", "pending", true},
		{"retry", "failed", "pending", true},
		{"retry", "failed", "pending", false},
		{"purge", "failed", "", true},
		{"purge", "failed", "", false},
	} {
		name := c.kind + "/" + c.status
		if c.header {
			name += "/header"
		}
		t.Run(name, func(t *testing.T) {
			s.exec(`DELETE FROM pepsi.message`)
			globex := map[string]string{"tenant": "globex"}
			// produce adds n messages of the filter (at notify, of tenant
			// globex, in the status the action takes) on pool.
			produce := func(ctx context.Context, n int, headers map[string]string, stage string) ([]int64, error) {
				ps := slices.Repeat([][]byte{[]byte("x")}, n)
				ids, err := s.db.EnqueueBulk(ctx, queue.Bulk{Stage: stage, Headers: headers, Payloads: ps})
				if err != nil {
					return nil, err
				}
				switch c.status {
				case "held":
					_, err = pool.Exec(ctx, `SELECT pepsi.hold($1)`, ids)
				case "failed":
					_, err = pool.Exec(ctx, `UPDATE pepsi.state SET status = 'failed', error = 'boom', attempts = 1 WHERE id = ANY($1)`, ids)
				}
				return ids, err
			}
			confirmed, err := produce(ctx(t), 30, globex, "notify")
			if err != nil {
				t.Fatal(err)
			}
			others, err := produce(ctx(t), 3, map[string]string{"tenant": "initech"}, "notify")
			if err != nil {
				t.Fatal(err)
			}
			elsewhere, err := produce(ctx(t), 3, globex, "other")
			if err != nil {
				t.Fatal(err)
			}
			form := url.Values{"scope": {"filter"}, "stage": {"notify"}, "status": {c.status}, "format": {"json"}}
			if c.header {
				form.Set("header", "tenant=globex")
			} else {
				others = nil // they match the filter: they are among the confirmed
			}
			if c.kind == "purge" && !c.header {
				form.Set("older", "0")
			}
			var page struct {
				Done         bool   `json:"done"`
				Count        int64  `json:"count"`
				Confirmation string `json:"confirmation"`
				Confirmed    int64  `json:"confirmed"`
				Changed      int64  `json:"changed_since_confirmation"`
				Missing      int64  `json:"missing"`
				ResultURL    string `json:"result_url"`
			}
			postJSON(t, s, "/"+c.kind, form, &page)
			want := int64(30)
			if !c.header {
				want = 33
			}
			if page.Done || page.Count != want || page.Confirmation == "" {
				t.Fatalf("confirmation: %+v, want %d messages and a token", page, want)
			}
			var all []int64
			if err := s.conn.QueryRow(ctx(t), `SELECT array_agg(id ORDER BY id) FROM pepsi.state WHERE stage = 'notify'`).Scan(&all); err != nil {
				t.Fatal(err)
			}
			if !c.header {
				confirmed = all
			}

			// The producer: matching messages, from now until the action is done.
			// Stopped between two of its messages, not in one (a statement
			// cancelled may yet commit).
			var stopped atomic.Bool
			stop := func() { stopped.Store(true) }
			var mu sync.Mutex
			var produced []int64
			var perr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stopped.Load() {
					ids, err := produce(ctx(t), 1, globex, "notify")
					if err != nil {
						perr = err
						return
					}
					mu.Lock()
					produced = append(produced, ids...)
					mu.Unlock()
				}
			}()
			waitFor(t, "the producer's first messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(produced) >= 5 })
			// Meanwhile one confirmed message finishes, and one is purged.
			done, gone := confirmed[3], confirmed[7]
			s.exec(`UPDATE pepsi.state SET status = 'done', updated_at = now() WHERE id = $1`, done)
			s.exec(`DELETE FROM pepsi.message WHERE id = $1`, gone)

			// Another filter with this confirmation: refused, nothing done.
			bad := url.Values{}
			for k, v := range form {
				bad[k] = v
			}
			bad.Set("stage", "other")
			bad.Set("confirm", "yes")
			bad.Set("confirmation", page.Confirmation)
			if r := s.do("POST", "/"+c.kind, bad, alice); r.code != http.StatusConflict {
				t.Errorf("a confirmation posted with another filter: %d\n%s", r.code, r.body)
			}

			form.Set("confirm", "yes")
			form.Set("confirmation", page.Confirmation)
			postJSON(t, s, "/"+c.kind, form, &page)
			stop()
			wg.Wait()
			if perr != nil {
				t.Fatal(perr)
			}
			if !page.Done || page.Count != want-2 || page.Confirmed != want || page.Changed != 1 || page.Missing != 1 {
				t.Errorf("result: %+v, want %d changed of %d confirmed, 1 changed since, 1 missing", page, want-2, want)
			}

			// Exactly the confirmed messages changed: read every row.
			rows, err := s.conn.Query(ctx(t), `SELECT id, status FROM pepsi.state`)
			if err != nil {
				t.Fatal(err)
			}
			now := map[int64]string{}
			var id int64
			var st string
			for rows.Next() {
				if err := rows.Scan(&id, &st); err != nil {
					t.Fatal(err)
				}
				now[id] = st
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			check := func(what string, ids []int64, want string) {
				t.Helper()
				for _, id := range ids {
					got, ok := now[id]
					if want == "" && ok || want != "" && got != want {
						t.Errorf("%s message %d: %q, want %q", what, id, got, want)
					}
				}
			}
			var acted []int64
			for _, id := range confirmed {
				if id != done && id != gone {
					acted = append(acted, id)
				}
			}
			check("a confirmed", acted, c.after)
			check("the finished", []int64{done}, "done")
			check("the purged", []int64{gone}, "")
			mu.Lock()
			check("a produced", produced, c.status)
			t.Logf("%d messages produced between the confirmation and the end of the action", len(produced))
			mu.Unlock()
			check("another tenant's", others, c.status)
			check("another stage's", elsewhere, c.status)

			body := s.get(page.ResultURL, http.StatusOK, alice)
			for _, w := range []string{"Of the " + itoa(want) + " messages the confirmation counted, 1 changed since and was left alone (now 1 done); no other message was touched.",
				"1 of them no longer existed."} {
				if !strings.Contains(strings.ReplaceAll(body, "&#39;", "'"), w) {
					t.Errorf("the result page lacks %q:\n%s", w, body)
				}
			}
			// Posted again (a double click): its result, no second action.
			form.Del("format")
			r := s.do("POST", "/"+c.kind, form, req{user: "alice", pass: alicePass, noFollow: true})
			if r.code != http.StatusSeeOther || r.header.Get("Location") != page.ResultURL {
				t.Errorf("the confirmation posted again: %d, Location %q, want a redirect to %s", r.code, r.header.Get("Location"), page.ResultURL)
			}
		})
	}
}

// waitFor waits up to a minute for ok.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
