package config

import (
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"0": 0, "300": 300 * time.Second, "1.5": 1500 * time.Millisecond, "90m": 90 * time.Minute,
		"36h": 36 * time.Hour, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "2d30m": 48*time.Hour + 30*time.Minute,
	} {
		if got, err := ParseAge(s); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "soon", "-5", "-1h", "7d-1h", "100001d", "d", "5 m"} {
		if got, err := ParseAge(s); err == nil {
			t.Errorf("ParseAge(%q) = %v, want an error", s, got)
		}
	}
}
