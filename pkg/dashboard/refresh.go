package dashboard

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// Auto-refresh: a page with data (the overview, the failures, the
// messages) says when it read them ("updated N s ago", kept current by
// dash.js) and reloads itself every N seconds when asked to with
// ?refresh=N, the overview by default (Options.Refresh). dash.js reloads it
// while it is visible and nobody is typing or has ticked a message; without
// JavaScript a <meta http-equiv="refresh"> does.

// Bounds of ?refresh=N.
const (
	minRefresh = 5
	maxRefresh = 3600
)

// listRefresh is how often a list reloads itself once asked to: the
// overview's period, or DefaultRefresh when the overview does not reload.
func listRefresh(overview int) int {
	if overview > 0 {
		return overview
	}
	return DefaultRefresh
}

// refreshParam reads ?refresh=N (0: off), def when it is absent (a
// negative def: off); a value out of bounds is answered with 400.
func (d *Dashboard) refreshParam(w http.ResponseWriter, r *http.Request, def int) (int, bool) {
	s := r.URL.Query().Get("refresh")
	if s == "" {
		return max(def, 0), true
	}
	n, err := strconv.Atoi(s)
	if err != nil || (n != 0 && (n < minRefresh || n > maxRefresh)) {
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("refresh %q: want 0 (off) or seconds from %d to %d", s, minRefresh, maxRefresh))
		return 0, false
	}
	return n, true
}

// cutAt is how long a text (an error, a reason) may be before a page shows
// only its start, with a control to see it all.
const cutAt = 200

// cut is the start of s, about cutAt bytes of it, cut at a character.
func cut(s string) string {
	if len(s) <= cutAt {
		return s
	}
	n := cutAt - 40
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// perMinute writes a change per minute with its sign: "+120/min", "−3.5/min".
func perMinute(v float64) string {
	sign := "+"
	if v < 0 {
		sign = "−"
	}
	a := math.Abs(v)
	switch {
	case a >= 10:
		return sign + number(int64(math.Round(a))) + "/min"
	case a >= 0.05:
		return sign + strconv.FormatFloat(a, 'f', 1, 64) + "/min"
	}
	return "0/min"
}
