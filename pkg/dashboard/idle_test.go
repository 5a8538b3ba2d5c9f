package dashboard_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/dashboard"
)

// TestIdleSampler: a dashboard nobody looks at samples the statistics (its
// charts go on) but does not count the queue; a page counts, and the
// sampler counts again from then on, without another page.
func TestIdleSampler(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, options: func(o *dashboard.Options) { o.SampleEvery = 20 * time.Millisecond }})
	s.enqueue("a", 3, []byte("x"))
	waitFor(t, "ten samples taken", func() bool { n, _ := s.dash.Sampled(); return n >= 10 })
	if _, at := s.dash.Sampled(); !at.IsZero() {
		t.Fatalf("the queue counted at %v with no page asked for", at)
	}
	s.get("/failures", http.StatusOK, req{})
	waitFor(t, "a count", func() bool { _, at := s.dash.Sampled(); return !at.IsZero() })
	_, first := s.dash.Sampled()
	waitFor(t, "the sampler counting again", func() bool { _, at := s.dash.Sampled(); return at.After(first) })
}
