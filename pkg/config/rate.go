package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a stage's RATE: at most Count messages handed out per Per, on
// average, with a burst of at most one period's count. The zero Rate is
// no limit.
type Rate struct {
	Count int           // messages a period; 0: no limit
	Per   time.Duration // the period: a second, a minute or an hour
}

// Limited reports whether r limits anything.
func (r Rate) Limited() bool { return r.Count > 0 }

// String returns r as RATE is written ("50/s"), or "" for no limit.
func (r Rate) String() string {
	if !r.Limited() {
		return ""
	}
	switch r.Per {
	case time.Second:
		return fmt.Sprintf("%d/s", r.Count)
	case time.Minute:
		return fmt.Sprintf("%d/m", r.Count)
	case time.Hour:
		return fmt.Sprintf("%d/h", r.Count)
	}
	return fmt.Sprintf("%d/%v", r.Count, r.Per)
}

// periods are the units RATE takes after the '/'.
var periods = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// setRate parses v, COUNT/s, COUNT/m or COUNT/h, into *dst, or says what
// is wrong with it.
func setRate(dst *Rate, key, v string) string {
	count, unit, ok := strings.Cut(v, "/")
	count, unit = strings.TrimSpace(count), strings.TrimSpace(unit)
	if !ok {
		return fmt.Sprintf("%s: bad rate %q (want COUNT/s, COUNT/m or COUNT/h, such as 50/s)", key, v)
	}
	per, known := periods[unit]
	if !known {
		return fmt.Sprintf("%s: bad period %q in %q (want s, m or h)", key, unit, v)
	}
	n, err := strconv.Atoi(count)
	switch {
	case err != nil && strings.Contains(err.Error(), "out of range"):
		return fmt.Sprintf("%s: %q is out of range (want an integer >= 1 before the '/')", key, v)
	case err != nil:
		return fmt.Sprintf("%s: bad count %q in %q (want an integer >= 1 before the '/')", key, count, v)
	case n < 1:
		return fmt.Sprintf("%s: the count must be an integer >= 1, not %q", key, v)
	}
	*dst = Rate{Count: n, Per: per}
	return ""
}
