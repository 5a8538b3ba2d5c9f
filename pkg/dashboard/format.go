package dashboard

import (
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// How the pages write times, ages, counts and rates.

// ago is how long ago t was, in one rounded unit: "12 s", "3 min", "5 h", "2 d".
func ago(t time.Time) string { return span(time.Since(t)) }

// ageSeconds is span of a number of seconds.
func ageSeconds(s float64) string { return span(time.Duration(s * float64(time.Second))) }

// span writes d in its largest whole unit.
func span(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " d"
}

// until says how long until t, in two units (spanFine): "in 5 min",
// "in 1 h 47 min", or "now" once it is past, or beyond a year, the date:
// "on 10000-01-01" (as far as a time.Duration goes, 106751 days, says
// nothing).
func until(t time.Time) string {
	switch d := time.Until(t); {
	case d <= time.Second:
		return "now"
	case d < 365*24*time.Hour:
		return "in " + spanFine(d)
	}
	return "on " + t.UTC().Format(time.DateOnly)
}

// timestamp writes t in UTC to the second.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// nnbsp is the narrow no-break space that groups thousands: a line never
// breaks inside a number (U+2009, the thin space, may break).
const nnbsp = "\u202f"

// number writes n with narrow no-break spaces between thousands: 1 234 567.
func number(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3*3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, nnbsp...)
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// percent writes a share (0.021) as a percentage: "2.1 %", "0 %", "< 0.1 %".
func percent(share float64) string {
	switch {
	case share <= 0:
		return "0" + nnbsp + "%"
	case share < 0.001:
		return "<" + nnbsp + "0.1" + nnbsp + "%"
	case share < 0.1:
		return strconv.FormatFloat(share*100, 'f', 1, 64) + nnbsp + "%"
	}
	return strconv.FormatFloat(share*100, 'f', 0, 64) + nnbsp + "%"
}

// optString is *s, or "" for nil.
func optString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// rate writes messages per second with two significant digits or so.
func rate(perSecond float64) string {
	switch {
	case perSecond <= 0:
		return "0/s"
	case perSecond < 0.1:
		return fmt.Sprintf("%.1f/min", perSecond*60)
	case perSecond < 10:
		return fmt.Sprintf("%.1f/s", perSecond)
	}
	return fmt.Sprintf("%.0f/s", perSecond)
}

// queryOf returns path with the query of the pairs key, value, ... whose
// value is not empty: queryOf "/messages" "stage" "a" "status" "" is
// /messages?stage=a.
func queryOf(path string, pairs ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			q.Set(pairs[i], pairs[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
