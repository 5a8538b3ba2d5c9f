package config

import (
	"fmt"
	"regexp"
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
