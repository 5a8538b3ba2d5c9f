package config

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// zonedCron is a CRON read in a zone (TZ=ZONE) whose clocks change, met
// as cron meets the change (Vixie cron, cronie), not as robfig/cron alone,
// which drops a slot in the hour the clocks skip and repeats one in the
// hour they repeat. A job at a fixed time (neither its minute nor its hour
// field a '*') whose time falls in the skipped hour comes at its end, the
// first instant after it (02:30 on the night 02:00 becomes 03:00 comes at
// 03:00), and one in the repeated hour comes once, the first time. A job
// of every minute or every hour (*, */15) goes by the clock as it runs.
type zonedCron struct {
	spec  *cron.SpecSchedule
	fixed bool // a job at a fixed time
}

// zoned returns spec as zonedCron when expr (CRON without its TZ=ZONE)
// names a zone, else spec itself.
func zoned(spec cron.Schedule, expr string) cron.Schedule {
	s, ok := spec.(*cron.SpecSchedule)
	if !ok || s.Location == time.Local || s.Location == time.UTC {
		return spec
	}
	return &zonedCron{spec: s, fixed: fixedTime(expr)}
}

// fixedTime reports whether the cron expression expr is a job at a fixed
// time, as cron tells one: neither its minute nor its hour field begins
// with '*' (or '?'); of the descriptors, all but @hourly.
func fixedTime(expr string) bool {
	if strings.HasPrefix(expr, "@") {
		return expr != "@hourly"
	}
	f := strings.Fields(expr)
	if len(f) == 6 { // seconds first
		f = f[1:]
	}
	star := func(s string) bool { return strings.HasPrefix(s, "*") || strings.HasPrefix(s, "?") }
	return len(f) >= 2 && !star(f[0]) && !star(f[1])
}

// Next returns the first slot after t.
func (z *zonedCron) Next(t time.Time) time.Time {
	for {
		n := z.spec.Next(t)
		if !z.fixed {
			return n
		}
		if g := z.skippedSlot(t, n); !g.IsZero() {
			return g
		}
		if n.IsZero() || !z.repeated(n) {
			return n
		}
		t = n
	}
}

// skippedSlot returns the end of the first hour skipped by the clocks
// after t and not after n (within five years when n is zero) in which the
// job has a time, or the zero time.
func (z *zonedCron) skippedSlot(t, n time.Time) time.Time {
	limit := n
	if limit.IsZero() {
		limit = t.AddDate(5, 0, 0)
	}
	for at := t.In(z.spec.Location); ; {
		_, end := at.ZoneBounds()
		if end.IsZero() || end.After(limit) {
			return time.Time{}
		}
		_, before := end.Add(-time.Nanosecond).Zone()
		if _, after := end.Zone(); after > before {
			// The skipped wall times are those from end on, read with
			// the offset from before the change.
			skipped := *z.spec
			skipped.Location = time.FixedZone("", before)
			if m := skipped.Next(end.Add(-time.Second)); !m.IsZero() && m.Before(end.Add(time.Duration(after-before)*time.Second)) {
				return end
			}
		}
		at = end
	}
}

// repeated reports whether the wall time of the slot n came before, in the
// hour the clocks repeated as they went back.
func (z *zonedCron) repeated(n time.Time) bool {
	n = n.In(z.spec.Location)
	start, _ := n.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, prev := start.Add(-time.Nanosecond).Zone()
	_, off := n.Zone()
	return prev > off && n.Before(start.Add(time.Duration(prev-off)*time.Second))
}
