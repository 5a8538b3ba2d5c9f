package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// secondsRE matches a plain number of seconds: "300", "0.5", ".5", "-1".
var secondsRE = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// parseDuration reads plain seconds (integer or decimal) or a Go duration
// string such as "5m" or "1h30m". Plain seconds go through
// time.ParseDuration too (as "0.5s"), so decimals are exact and overflow is
// caught.
func parseDuration(s string) (time.Duration, bool) {
	if secondsRE.MatchString(s) {
		s += "s"
	}
	d, err := time.ParseDuration(s)
	return d, err == nil
}

// setDuration parses v into *dst, or says what is wrong with it. Zero is
// allowed only when allowZero (RETENTION, where 0 means off); negative never.
func setDuration(dst *time.Duration, key, v string, allowZero bool) string {
	d, ok := parseDuration(v)
	switch {
	case !ok:
		return fmt.Sprintf("%s: bad duration %q (want seconds or a duration such as 5m)", key, v)
	case d < 0 && allowZero:
		return fmt.Sprintf("%s: must not be negative, not %q (0 turns it off)", key, v)
	case d <= 0 && !allowZero:
		return fmt.Sprintf("%s: must be greater than zero, not %q", key, v)
	}
	*dst = d
	return ""
}

// daysRE splits a leading number of days off an age: "7d", "1d12h".
var daysRE = regexp.MustCompile(`^([0-9]+)d(.*)$`)

// errAge is what ParseAge says of anything it cannot read.
var errAge = errors.New("want seconds or a duration such as 90m, 36h or 7d")

// ParseAge reads an age, as pepsi queue's --older-than and the dashboard's
// filters take it: plain seconds ("300"), a Go duration ("90m", "1h30m"),
// or days first ("7d", "1d12h"). A negative age is an error.
func ParseAge(s string) (time.Duration, error) {
	var days time.Duration
	rest := s
	if m := daysRE.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > 100000 {
			return 0, errAge
		}
		days, rest = time.Duration(n)*24*time.Hour, m[2]
		if rest == "" {
			return days, nil
		}
	}
	if secondsRE.MatchString(rest) && days == 0 {
		rest += "s"
	}
	d, err := time.ParseDuration(rest)
	if err != nil || d < 0 || days+d < 0 {
		return 0, errAge
	}
	return days + d, nil
}
