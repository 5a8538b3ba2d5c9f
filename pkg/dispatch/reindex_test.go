package dispatch

import (
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestPickReindex: the rule rebuilds an index over twice its need by a
// megabyte or more, the most wasteful first, and leaves alone one that is
// not bloated, one whose waste is small, one rebuilt lately and one whose
// table has an index build under way.
func TestPickReindex(t *testing.T) {
	const mb = 1 << 20
	now := time.Now()
	next := map[string]time.Time{"pepsi.lately": now.Add(time.Minute), "pepsi.due": now.Add(-time.Second)}
	for _, c := range []struct {
		name  string
		sizes []queue.IndexSize
		want  string // "" for none
	}{
		{"none", nil, ""},
		{"not bloated", []queue.IndexSize{{Name: "pepsi.a", Size: 30 * mb, Need: 20 * mb}}, ""},
		{"twice, not more", []queue.IndexSize{{Name: "pepsi.a", Size: 40 * mb, Need: 20 * mb}}, ""},
		{"bloated", []queue.IndexSize{{Name: "pepsi.a", Size: 41 * mb, Need: 20 * mb}}, "pepsi.a"},
		{"empty", []queue.IndexSize{{Name: "pepsi.a", Size: 27 * mb, Need: 16 << 10}}, "pepsi.a"},
		{"small waste", []queue.IndexSize{{Name: "pepsi.a", Size: mb - 1, Need: 16 << 10}}, ""},
		{"rebuilt lately", []queue.IndexSize{{Name: "pepsi.lately", Size: 27 * mb, Need: mb}}, ""},
		{"due again", []queue.IndexSize{{Name: "pepsi.due", Size: 27 * mb, Need: mb}}, "pepsi.due"},
		{"a build under way", []queue.IndexSize{{Name: "pepsi.a", Size: 27 * mb, Need: mb, Busy: true}}, ""},
		{"the most waste first", []queue.IndexSize{
			{Name: "pepsi.a", Size: 10 * mb, Need: mb},
			{Name: "pepsi.b", Size: 40 * mb, Need: 19 * mb},
			{Name: "pepsi.c", Size: 30 * mb, Need: 2 * mb},
			{Name: "pepsi.lately", Size: 90 * mb, Need: mb},
		}, "pepsi.c"},
	} {
		got, ok := pickReindex(c.sizes, next, now)
		if ok != (c.want != "") || got.Name != c.want {
			t.Errorf("%s: picked %q (%v), want %q", c.name, got.Name, ok, c.want)
		}
	}
}
