package dashboard_test

import (
	"slices"
	"testing"
)

// TestOverviewJudgesAsDoctor: the overview's banners follow the health
// model's rules, as pepsi doctor does: a stage needs an owner when it is
// configured, not because it has history (failed messages only); a stage
// no section configures is one with messages waiting, not one with a
// cancelled message.
func TestOverviewJudgesAsDoctor(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true})
	ownStages(t, s.dsn, "a")
	s.fail(s.enqueue("gone", 1, nil), "no")
	s.exec(`UPDATE pepsi.state SET status = 'cancelled' WHERE id = ANY($1)`, s.enqueue("old", 1, nil))
	var o overviewJSON
	s.getJSON("/", req{}, &o)
	if len(o.Unowned) != 0 {
		t.Errorf("unowned %v: a stage with failed messages only needs no dispatcher", o.Unowned)
	}
	var b bannersJSON
	s.getJSON("/", req{}, &b)
	if k := b.kinds(); len(k) != 0 {
		t.Errorf("banners %v: %v", k, b.Banners)
	}
	if got := o.Dispatchers; len(got) != 1 || !slices.Equal(got[0].Stages, []string{"a"}) {
		t.Errorf("dispatchers %+v", got)
	}
}
