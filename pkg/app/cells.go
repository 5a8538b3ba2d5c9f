package app

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// What the tables and summary lines print of the database's text and
// times.

// printable is s with every character that could act on a terminal
// escaped as Go writes it (\x1b, \a, \u202e; a byte that is not UTF-8 as
// \xff): C0 and C1 controls, DEL, line and paragraph separators and the
// bidirectional controls. Errors, reasons, keys, stage names and user
// names come from the database, where anyone who may write a row put
// them: printed raw, an escape in one could retitle the terminal or clear
// it. Every table and summary line prints its cells through it.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[0])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[0])&15, 16))
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// unsafeRune reports whether r is a character that printable escapes.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Bidi_Control)
}

// farAway is how far off a time may be for the tables to write it as a
// duration ("in 3d04h"); a later one is written as its date.
const farAway = 365 * 24 * time.Hour

// fmtDue says when t falls due, seen at now: "due" once it is past,
// "in 5m03s" within farAway, else its local date (a timeout in the year
// 10000 is no 106751 days away, which is as far as a time.Duration goes).
func fmtDue(t, now time.Time) string {
	switch d := t.Sub(now); {
	case d <= 0:
		return "due"
	case d < farAway:
		return "in " + fmtAge(d)
	}
	return t.Local().Format(time.DateOnly)
}

// printableCells is printable of each cell.
func printableCells(cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = printable(c)
	}
	return out
}
