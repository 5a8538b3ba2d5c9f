package dashboard_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Hostile values already in the database (stored before the SQL API
// refused them, or written by anyone who may write a row), as the
// dashboard shows them.

// TestFarTimeout: a timeout after the year 9999 is answered like any
// other: the JSON of the list and of the message has it, with the year
// whole; the pages write its date, not a duration of 106751 days.
func TestFarTimeout(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	ids := s.enqueue("a", 2, nil)
	s.exec("UPDATE pepsi.state SET status = 'paused', timeout = '10000-01-01 00:00:00+00' WHERE id = $1", ids[0])
	for _, path := range []string{"/messages?format=json", "/messages/" + itoa(ids[0]) + "?format=json"} {
		r := s.do("GET", path, nil, req{})
		if r.code != http.StatusOK || !strings.Contains(r.body, `"timeout": "10000-01-01T00:00:00`) {
			t.Errorf("GET %s: %d\n%s", path, r.code, r.body)
		}
	}
	for _, path := range []string{"/messages", "/messages/" + itoa(ids[0])} {
		body := s.get(path, http.StatusOK, req{})
		if strings.Contains(body, "106751") || !strings.Contains(body, "10000-01-01") {
			t.Errorf("GET %s: the year 10000 as a duration, or not at all:\n%s", path, body)
		}
	}
}

// TestJSONEncodingFails: a value that cannot be encoded is a 500 with a
// JSON error and a logged line, not a 200 with an empty body.
func TestJSONEncodingFails(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	w := httptest.NewRecorder()
	s.dash.WriteJSON(w, httptest.NewRequest("GET", "/x?format=json", nil), map[string]float64{"share": math.NaN()})
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"error": "encoding the answer failed`) {
		t.Errorf("%d %q, want 500 with the error", w.Code, w.Body.String())
	}
	if logs := s.logs.String(); !strings.Contains(logs, `msg="dashboard: encoding JSON failed" path=/x`) {
		t.Errorf("not logged:\n%s", logs)
	}
}

// TestLongReasons: the lists, the failure groups and the overview read
// and answer the start of long texts, whatever the database holds: 30
// failed messages with a distinct error of a megabyte each, and a stage
// paused with a reason of 1.2 MB (both stored before the SQL API bounded
// them), make pages of kilobytes; a message's own page shows at most 64
// KiB of its error. The overview's JSON has no Go-named keys.
func TestLongReasons(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	ids := s.enqueue("a", 30, nil)
	s.exec(`UPDATE pepsi.state SET status = 'failed', error = 'order ' || 100 + id || ': ' || repeat('x', 300) || repeat(md5(id::text), 32768) WHERE id = ANY($1)`, ids)
	s.exec(`INSERT INTO pepsi.paused_stages (stage, paused_by, reason) VALUES ('a', 'x', repeat('why ', 300000))`)
	for _, tc := range []struct {
		path string
		max  int
	}{
		{"/failures", 60 << 10},
		{"/failures?format=json", 60 << 10},
		{"/messages?status=failed", 200 << 10},
		{"/messages?status=failed&format=json", 200 << 10},
		{"/", 60 << 10},
		{"/?format=json", 60 << 10},
		{"/messages/" + itoa(ids[0]), 3 * 64 << 10},
		{"/messages/" + itoa(ids[0]) + "?format=json", 3 * 64 << 10},
	} {
		if body := s.get(tc.path, http.StatusOK, req{}); len(body) > tc.max {
			t.Errorf("GET %s: %d bytes, want at most %d", tc.path, len(body), tc.max)
		}
	}
	var groups struct {
		Groups []struct {
			Reason string `json:"reason"`
			Count  int64  `json:"count"`
			URL    string `json:"messages_url"`
		} `json:"groups"`
	}
	s.getJSON("/failures", req{}, &groups)
	if len(groups.Groups) != 1 || groups.Groups[0].Count != 30 {
		t.Fatalf("failure groups: %+v, want one of 30 (order N: and the same start)", groups.Groups)
	}
	var list struct {
		Rows []struct{} `json:"rows"`
	}
	s.getJSON(groups.Groups[0].URL, req{}, &list)
	if len(list.Rows) != 30 {
		t.Errorf("the group's list %s: %d messages, want 30", groups.Groups[0].URL, len(list.Rows))
	}
	body := s.get("/?format=json", http.StatusOK, req{})
	if strings.Contains(body, `"Lead"`) || strings.Contains(body, `"Rest"`) || !strings.Contains(body, `"lead_statuses": [`) {
		t.Errorf("the overview's JSON keys:\n%s", body)
	}
}
