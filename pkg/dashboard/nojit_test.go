package dashboard_test

import "testing"

// TestNoJIT: the dashboard's sessions run without JIT compilation: its
// statements are short, and on tables without statistics compiling one
// took a second where running it took a millisecond.
func TestNoJIT(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{noSampler: true})
	db, err := s.src.DB(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // any session of the pool
		if v, err := db.Setting(ctx(t), "jit"); err != nil || v != "off" {
			t.Errorf("jit in the dashboard's session: %q, %v", v, err)
		}
	}
}
