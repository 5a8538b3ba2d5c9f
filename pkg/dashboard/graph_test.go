package dashboard_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestGraphPages: the message page shows a child's parent and result and
// a parent's children (counts by status with their lists, the newest 100,
// a link to them all); /messages?parent=ID lists the children; the
// overview counts the waiting parents and their open children by join
// stage.
func TestGraphPages(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"split", "work", "merge"}})
	parent := s.enqueue("split", 1, nil)[0]
	s.exec(`UPDATE pepsi.state SET status = 'running' WHERE id = $1`, parent)
	s.exec(`SELECT pepsi.spawn_many($1, 'work', array_fill(''::bytea, ARRAY[105]))`, parent)
	s.exec(`SELECT pepsi.join($1, 'merge')`, parent)
	kids := messageIDsOf(t, s, "/messages?parent="+itoa(parent)+"&limit=1000")
	if len(kids) != 105 {
		t.Fatalf("/messages?parent=%d: %d children, want 105", parent, len(kids))
	}
	slices.Sort(kids)
	s.exec(`UPDATE pepsi.state SET status = 'done', result = 'sum <7>' WHERE id = $1`, kids[0])
	s.fail(kids[1:2], "no")

	body := s.get("/messages/"+itoa(parent), http.StatusOK, req{})
	for _, want := range []string{
		`105: <a href="/messages?parent=` + itoa(parent) + `&amp;status=pending">103 pending</a>`,
		`<a href="/messages?parent=` + itoa(parent) + `&amp;status=failed">1 failed</a>`,
		`The newest 100 of them`,
		`<a class="children" href="/messages?parent=` + itoa(parent) + `">list them all</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("parent's page lacks %q", want)
		}
	}
	if n := strings.Count(body, `<td class="n"><a href="/messages/`); n != 100 {
		t.Errorf("parent's page lists %d children, want 100", n)
	}
	body = s.get("/messages/"+itoa(kids[0]), http.StatusOK, req{})
	for _, want := range []string{
		`<a href="/messages/` + itoa(parent) + `">` + itoa(parent) + `</a> at <b>merge</b>, <span class="waiting">waiting</span>`,
		`7 bytes<pre class="payload">sum &lt;7&gt;</pre>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("child's page lacks %q", want)
		}
	}

	var o struct {
		Joins []struct {
			Stage    string `json:"stage"`
			Parents  int64  `json:"parents"`
			Children int64  `json:"open_children"`
		} `json:"joins"`
		Totals map[string]int64 `json:"totals"`
	}
	testkit.Wait(t, "the overview's count of the waiting parent", time.Minute, func() bool {
		s.getJSON("/", req{}, &o)
		return o.Totals["waiting"] == 1
	})
	if len(o.Joins) != 1 || o.Joins[0].Stage != "merge" || o.Joins[0].Parents != 1 || o.Joins[0].Children != 103 || o.Totals["waiting"] != 1 {
		t.Errorf("overview: joins %+v, waiting %d", o.Joins, o.Totals["waiting"])
	}
	if body := s.get("/", http.StatusOK, req{}); !strings.Contains(body, `<a href="/messages?stage=merge&amp;status=waiting">1</a>`) {
		t.Errorf("overview lacks the join's link")
	}
}

// messageIDsOf is messageIDs' ids.
func messageIDsOf(t *testing.T, s *site, path string) []int64 {
	ids, _ := messageIDs(t, s, path)
	return ids
}
