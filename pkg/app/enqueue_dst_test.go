package app

import (
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// nextChange returns the next time after from at which loc's clocks go
// forward (a gap), with the offsets before and after it.
func nextChange(t *testing.T, loc *time.Location, from time.Time) (at time.Time, before, after int) {
	t.Helper()
	for at = from.In(loc); at.Before(from.AddDate(3, 0, 0)); {
		_, end := at.ZoneBounds()
		if end.IsZero() {
			break
		}
		_, before = end.Add(-time.Second).Zone()
		_, after = end.Zone()
		if after > before {
			return end, before, after
		}
		at = end
	}
	t.Fatalf("%s: no change of clocks forward within three years of %v", loc, from)
	return
}

// TestEnqueueAtDSTGap: `pepsi enqueue --at` with a local time in the hour
// skipped when the clocks go forward (TZ in the binary's environment) is
// scheduled after that time, never before it: read with the offset from
// before the change, as PostgreSQL reads it (02:30 in New York is 03:30
// EDT). Times beside the gap, and one in the hour repeated in autumn
// (its first instant), are read as written.
func TestEnqueueAtDSTGap(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-parse]\nPROGRAM = /bin/true\n")
	pepsi := binary(t)
	from := time.Now().Add(24 * time.Hour)
	for _, zone := range []string{"America/New_York", "America/Los_Angeles", "America/St_Johns", "Europe/Berlin"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		change, before, after := nextChange(t, loc, from)
		clock := func(at time.Time, off int) string {
			return at.In(time.FixedZone("", off)).Format("2006-01-02 15:04:05")
		}
		back := time.Duration(after-before) * time.Second // the length of the gap
		tests := []struct {
			at   string    // the local time asked
			want time.Time // when it runs
		}{
			{clock(change.Add(30*time.Minute), before), change.Add(30 * time.Minute)}, // 02:30 → 03:30
			{clock(change, before), change},                                           // 02:00 → 03:00
			{clock(change.Add(-time.Second), before), change.Add(-time.Second)},       // 01:59:59, before the gap
			{clock(change.Add(back), after), change.Add(back)},                        // 04:00 after a gap of an hour
		}
		// The hour repeated in autumn: its first time.
		autumn := change.AddDate(0, 6, 0)
		_, end := autumn.ZoneBounds()
		if _, o := end.Zone(); o < after {
			first := end.Add(-30 * time.Minute)
			tests = append(tests, struct {
				at   string
				want time.Time
			}{clock(first, after), first})
		}
		t.Setenv("TZ", zone)
		for _, tt := range tests {
			r := exe(t, pepsi, "x", "enqueue", "--stage", "parse", "--at", tt.at)
			id := oneID(t, r)
			st, to, _ := rowOf(t, db, id)
			if st != queue.Paused || to == nil || !to.Equal(tt.want) {
				t.Errorf("TZ=%s --at %q: %s, runs at %v, want %v", zone, tt.at, st, to, tt.want.In(loc))
			}
		}
	}
}
