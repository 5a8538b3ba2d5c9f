package dashboard_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestUnreadableParams: a query string that does not parse, and a
// parameter with a NUL byte or bytes that are not UTF-8 (which PostgreSQL
// text cannot hold or refuses), are answered with 400 naming the problem,
// on every page and action, as HTML and as JSON, and never reach the
// database; text that is merely unusual is read as before.
func TestUnreadableParams(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	ids := s.enqueue("a", 1, []byte("x"))
	s.fail(ids, "no")
	id := itoa(ids[0])

	const (
		nul     = "q: a NUL byte (PostgreSQL text cannot hold one)"
		notUTF8 = "q: not valid UTF-8"
		escape  = `query string: invalid URL escape "%zz"`
	)
	for _, tc := range []struct{ path, says string }{
		{"/messages?q=%00", nul},
		{"/messages?q=a%00b", nul},
		{"/messages?q=%ff%fe", notUTF8},
		{"/messages?status=failed&q=%c3", notUTF8},
		{"/messages?stage=%00", "stage: a NUL byte"},
		{"/messages?stage=%ff", "stage: not valid UTF-8"},
		{"/messages?reason=%00", "reason: a NUL byte"},
		{"/messages?status=failed&reason=%fe", "reason: not valid UTF-8"},
		{"/messages?q=%zz", escape},
		{"/messages?stage=a&q=%zz", escape},
		{"/messages?q=%", `query string: invalid URL escape "%"`},
		{"/messages?stage=a;status=failed", "query string: invalid semicolon separator in query"},
		{"/failures?stage=%00", "stage: a NUL byte"},
		{"/failures?stage=%ff%fe", "stage: not valid UTF-8"},
		{"/failures?stage=%zz", escape},
		{"/?q=%zz", escape},
		{"/?x=%ff", "x: not valid UTF-8"},
		{"/messages/" + id + "?q=%zz", escape},
		{"/messages/" + id + "/payload?q=%zz", escape},
	} {
		r := s.do("GET", tc.path, nil, alice)
		if r.code != http.StatusBadRequest || !strings.Contains(r.text, tc.says) ||
			!strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Errorf("%s: %d %s, want 400 saying %q:\n%s", tc.path, r.code, r.header.Get("Content-Type"), tc.says, r.body)
		}
		if strings.HasPrefix(tc.path, "/messages?") && !strings.Contains(r.body, `name="q"`) {
			t.Errorf("%s: the list's 400 is not the list with its filters:\n%s", tc.path, r.body)
		}
		var p struct {
			Status int    `json:"status"`
			Error  string `json:"error"`
		}
		r = s.do("GET", tc.path+"&format=json", nil, alice)
		if r.code != http.StatusBadRequest || jsonUnmarshal(r.body, &p) != nil || p.Status != 400 || !strings.Contains(p.Error, tc.says) {
			t.Errorf("%s as JSON: %d %s", tc.path, r.code, r.body)
		}
		r = s.do("GET", tc.path, nil, req{user: alice.user, pass: alice.pass, accept: "application/json"})
		if r.code != http.StatusBadRequest || r.header.Get("Content-Type") != "application/json" || !strings.Contains(r.body, `"error"`) {
			t.Errorf("%s with Accept: application/json: %d %s", tc.path, r.code, r.body)
		}
	}

	// The actions: the posted form and the query string.
	for _, tc := range []struct {
		path string
		form url.Values
		says string
	}{
		{"/retry", url.Values{"status": {"failed"}, "stage": {"a\x00"}}, "stage: a NUL byte"},
		{"/retry", url.Values{"status": {"failed"}, "reason": {"\xff"}}, "reason: not valid UTF-8"},
		{"/purge", url.Values{"status": {"done"}, "older": {"0"}, "stage": {"\x00"}}, "stage: a NUL byte"},
		{"/purge", url.Values{"status": {"done"}, "older": {"0"}, "stage": {"a\xfe"}}, "stage: not valid UTF-8"},
		{"/retry?stage=%zz", url.Values{"status": {"failed"}}, escape},
		{"/purge?x=%00", url.Values{"status": {"done"}, "older": {"0"}}, "x: a NUL byte"},
	} {
		for _, confirm := range []string{"", "yes"} {
			if confirm != "" {
				tc.form.Set("confirm", confirm)
			}
			if r := s.do("POST", tc.path, tc.form, alice); r.code != http.StatusBadRequest || !strings.Contains(r.text, tc.says) {
				t.Errorf("POST %s %q: %d, want 400 saying %q:\n%s", tc.path, tc.form.Encode(), r.code, tc.says, r.body)
			}
		}
	}
	// A posted form that does not parse.
	for _, path := range []string{"/retry", "/purge"} {
		r, err := http.NewRequest("POST", s.base+path, strings.NewReader("status=failed&confirm=yes&stage=%zz"))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.SetBasicAuth(alice.user, alice.pass)
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `form: invalid URL escape &#34;%zz&#34;`) {
			t.Errorf("POST %s with a form that does not parse: %d\n%s", path, resp.StatusCode, body)
		}
	}
	wantStates(t, "after the refused retries", s.states(ids), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("no")})

	// Unusual text that PostgreSQL takes is searched as before.
	for _, path := range []string{"/messages?q=%25zz", "/messages?q=%C3%A9%E2%80%94%F0%9F%92%A5", "/messages?q=%01%7f", "/failures?stage=%E2%80%94"} {
		s.get(path, http.StatusOK, alice)
	}
	if logs := s.logs.String(); strings.Contains(logs, "reading the database failed") {
		t.Errorf("a bad parameter reached the database:\n%s", logs)
	}
}
