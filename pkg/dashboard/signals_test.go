package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestBannerSeverity: no dispatcher is an error, an intentional pause a
// notice; the errors come first; each banner's class says its severity.
func TestBannerSeverity(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true})
	s.exec(`INSERT INTO pepsi.paused_stages (stage, paused_by, reason) VALUES ('a', 'alice', 'a deploy')`)
	var o struct {
		Banners []struct{ Kind, Severity string } `json:"banners"`
	}
	testkit.Wait(t, "the banners of no dispatcher and a pause", time.Minute, func() bool {
		o.Banners = nil
		s.getJSON("/", req{}, &o)
		return len(o.Banners) == 2
	})
	if o.Banners[0].Kind != "no_dispatcher" || o.Banners[0].Severity != "error" || o.Banners[1].Kind != "paused" || o.Banners[1].Severity != "notice" {
		t.Errorf("banners: %+v, want no_dispatcher (error) first, then paused (notice)", o.Banners)
	}
	body := s.get("/", http.StatusOK, req{})
	if !strings.Contains(body, `<li class="banner no_dispatcher error" title="error">`) || !strings.Contains(body, `<li class="banner paused notice" title="notice">`) {
		t.Errorf("the banners' classes:\n%s", body)
	}
}

// TestConfirmationBack: the confirmation's way back is a link of its own,
// out of the form, after it: never beside the red button.
func TestConfirmationBack(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"a"}, noSampler: true})
	s.enqueue("a", 2, nil)
	for _, f := range []url.Values{
		{"scope": {"filter"}, "stage": {"a"}, "status": {"pending"}},
		{"stage": {"a"}},
	} {
		path := "/cancel"
		if f.Get("scope") == "" {
			path = "/pause"
		}
		r := s.do("POST", path, f, alice)
		if r.code != http.StatusOK {
			t.Fatalf("POST %s: %d\n%s", path, r.code, r.body)
		}
		form := r.body[strings.Index(r.body, `<form method="post" class="confirm">`):]
		form = form[:strings.Index(form, "</form>")]
		if strings.Contains(form, "<a ") || !strings.Contains(r.body, `</form>
<p class="quiet">`) || !strings.Contains(r.body, `<p class="back"><a class="back" href="`) {
			t.Errorf("POST %s: the way back is in the form, or missing:\n%s", path, r.body)
		}
	}
}

// TestThemeSwitch: every page loads theme.js before it is drawn and has
// the switch (hidden without JavaScript); the style sheet has both themes
// by choice as well as by the system's preference.
func TestThemeSwitch(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{noSampler: true})
	for _, p := range []string{"/", "/failures", "/messages", "/schedules"} {
		body := s.get(p, http.StatusOK, req{})
		head := body[:strings.Index(body, "</head>")]
		if !strings.Contains(head, `<script src="/static/theme.js"></script>`) || strings.Index(head, "theme.js") > strings.Index(head, "style.css") ||
			!strings.Contains(body, `<button type="button" class="theme" hidden`) {
			t.Errorf("%s: no theme switch:\n%s", p, body)
		}
	}
	if js := s.get("/static/theme.js", http.StatusOK, req{}); !strings.Contains(js, `localStorage.getItem("pepsi-theme")`) {
		t.Errorf("theme.js:\n%s", js)
	}
	css := s.get("/static/style.css", http.StatusOK, req{})
	for _, want := range []string{`:root:not([data-theme="light"])`, `:root[data-theme="dark"]`, `:root[data-theme="light"]`} {
		if !strings.Contains(css, want) {
			t.Errorf("the style sheet lacks %s", want)
		}
	}
}
