package admin

import (
	"strconv"
	"time"
)

// Time is a time whose JSON is RFC 3339 where RFC 3339 can write it (the
// years 0 to 9999), and beyond, the same form with the year whole, as
// PostgreSQL's to_json writes it: a message's timeout stored before the
// SQL API refused such times must not make a whole listing fail.
type Time struct{ time.Time }

// MarshalJSON writes t as RFC 3339, with more digits of year past 9999.
func (t Time) MarshalJSON() ([]byte, error) {
	if y := t.Year(); y >= 0 && y <= 9999 {
		return t.Time.MarshalJSON()
	}
	return strconv.AppendQuote(nil, t.Format(time.RFC3339Nano)), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *Time) UnmarshalJSON(b []byte) error {
	if err := t.Time.UnmarshalJSON(b); err == nil {
		return nil
	}
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	// A year of more than four digits: parsed with a stand-in year of 2000
	// (a leap year, so that 29 February parses), then set.
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	year, err := strconv.Atoi(s[:i])
	if err != nil || i <= 4 {
		return &time.ParseError{Layout: time.RFC3339, Value: s, Message: ": not a time"}
	}
	p, err := time.Parse(time.RFC3339Nano, "2000"+s[i:])
	if err != nil {
		return err
	}
	t.Time = time.Date(year, p.Month(), p.Day(), p.Hour(), p.Minute(), p.Second(), p.Nanosecond(), p.Location())
	return nil
}
