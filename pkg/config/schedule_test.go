package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSchedules(t *testing.T) {
	c := mustParse(t, `[schedule-report]
CRON = 30 2 * * 1-5        ; weekdays at 02:30 UTC
STAGE = parse
PAYLOAD = """{"report": "daily"}"""
HEADERS = {"source": "cron", "tenant": "a b"}
PRIORITY = -5

[stage-parse]
PROGRAM = parse

[schedule-tick]
EVERY = 5m
STAGE = parse
`)
	if len(c.Schedules) != 2 {
		t.Fatalf("%d schedules, want 2", len(c.Schedules))
	}
	r, tick := c.Schedules[0], c.Schedules[1]
	if r.Name != "report" || r.Cron != "30 2 * * 1-5" || r.Every != 0 || r.Stage != "parse" || string(r.Payload) != `{"report": "daily"}` ||
		!reflect.DeepEqual(r.Headers, map[string]string{"source": "cron", "tenant": "a b"}) || r.Priority != -5 || r.Line != 1 || r.StageLine != 3 {
		t.Errorf("report: %+v", r)
	}
	if r.Spec() != "CRON 30 2 * * 1-5" {
		t.Errorf("report: Spec() = %q", r.Spec())
	}
	if tick.Name != "tick" || tick.Cron != "" || tick.Every != 5*time.Minute || tick.Payload != nil || tick.Headers != nil || tick.Priority != 0 {
		t.Errorf("tick: %+v", tick)
	}
	if tick.Spec() != "EVERY 5m0s" {
		t.Errorf("tick: Spec() = %q", tick.Spec())
	}
}

// at is a UTC time from "2006-01-02 15:04:05".
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.DateTime, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestScheduleSlots(t *testing.T) {
	tests := []struct {
		when        string // CRON = … or EVERY = …
		now         string
		latest, nxt string // "" for none
	}{
		{"CRON = */5 * * * *", "2026-12-06 17:07:30", "2026-12-06 17:05:00", "2026-12-06 17:10:00"},
		{"CRON = */5 * * * *", "2026-12-06 17:05:00", "2026-12-06 17:05:00", "2026-12-06 17:10:00"},
		{"CRON = */5 * * * *", "2026-12-06 17:04:59", "2026-12-06 17:00:00", "2026-12-06 17:05:00"},
		{"CRON = 30 2 * * 1-5", "2026-12-06 17:00:00", "2026-12-04 02:30:00", "2026-12-07 02:30:00"}, // a Sunday
		{"CRON = @monthly", "2026-12-06 00:00:00", "2026-12-01 00:00:00", "2027-01-01 00:00:00"},
		{"CRON = @hourly", "2026-12-06 17:00:00", "2026-12-06 17:00:00", "2026-12-06 18:00:00"},
		{"CRON = */10 * * * * *", "2026-12-06 17:00:25", "2026-12-06 17:00:20", "2026-12-06 17:00:30"},
		{"CRON = 0 0 29 2 *", "2026-12-06 00:00:00", "2024-02-29 00:00:00", "2028-02-29 00:00:00"},
		// 09:00 in Berlin (UTC+1 in winter, +2 in summer).
		{"CRON = TZ=Europe/Berlin 0 9 * * *", "2026-12-06 12:00:00", "2026-12-06 08:00:00", "2026-12-07 08:00:00"},
		{"CRON = CRON_TZ=Europe/Berlin 0 9 * * *", "2026-07-01 07:00:00", "2026-07-01 07:00:00", "2026-07-02 07:00:00"},
		// Where the clocks change, as cron: a job at a fixed time in the
		// hour New York skips (2027-03-14 02:00 EST to 03:00 EDT, 07:00Z)
		// comes at its end, one in the hour it repeats (2027-11-07 02:00
		// EDT to 01:00 EST, 06:00Z) once, the first time.
		{"CRON = TZ=America/New_York 30 2 * * *", "2027-03-14 05:00:00", "2027-03-13 07:30:00", "2027-03-14 07:00:00"},
		{"CRON = TZ=America/New_York 30 2 * * *", "2027-03-14 07:00:00", "2027-03-14 07:00:00", "2027-03-15 06:30:00"},
		{"CRON = TZ=America/New_York 0 2 * * *", "2027-03-14 06:59:59", "2027-03-13 07:00:00", "2027-03-14 07:00:00"},
		{"CRON = TZ=America/New_York 30 2 * * 1", "2027-03-14 05:00:00", "2027-03-08 07:30:00", "2027-03-15 06:30:00"}, // Mondays: not the Sunday skipped
		{"CRON = TZ=America/New_York 30 1 * * *", "2027-11-07 05:00:00", "2027-11-06 05:30:00", "2027-11-07 05:30:00"},
		{"CRON = TZ=America/New_York 30 1 * * *", "2027-11-07 06:45:00", "2027-11-07 05:30:00", "2027-11-08 06:30:00"},
		{"CRON = TZ=America/St_Johns 30 2 * * *", "2027-03-14 05:00:00", "2027-03-13 06:00:00", "2027-03-14 05:30:00"},
		{"CRON = TZ=Europe/Berlin 30 2 * * *", "2027-03-28 00:30:00", "2027-03-27 01:30:00", "2027-03-28 01:00:00"},
		{"CRON = TZ=Europe/Berlin 30 2 * * *", "2027-10-31 00:45:00", "2027-10-31 00:30:00", "2027-11-01 01:30:00"},
		{"CRON = TZ=Europe/Berlin @daily", "2027-03-28 00:30:00", "2027-03-27 23:00:00", "2027-03-28 22:00:00"},
		// Every so many minutes or hours: by the clock as it goes.
		{"CRON = TZ=America/New_York */30 * * * *", "2027-03-14 06:45:00", "2027-03-14 06:30:00", "2027-03-14 07:00:00"},
		{"CRON = TZ=America/New_York */30 2 * * *", "2027-03-14 05:00:00", "2027-03-13 07:30:00", "2027-03-15 06:00:00"},
		{"CRON = TZ=America/New_York 0 * * * *", "2027-11-07 05:30:00", "2027-11-07 05:00:00", "2027-11-07 06:00:00"},
		{"CRON = TZ=America/New_York @hourly", "2027-11-07 06:00:00", "2027-11-07 06:00:00", "2027-11-07 07:00:00"},
		{"EVERY = 5m", "2026-12-06 17:07:30", "2026-12-06 17:05:00", "2026-12-06 17:10:00"},
		{"EVERY = 5m", "2026-12-06 17:05:00", "2026-12-06 17:05:00", "2026-12-06 17:10:00"},
		{"EVERY = 1", "2026-12-06 17:05:00", "2026-12-06 17:05:00", "2026-12-06 17:05:01"},
		{"EVERY = 24h", "2026-12-06 17:05:00", "2026-12-06 00:00:00", "2026-12-07 00:00:00"},
		{"EVERY = 7m", "1969-12-31 23:59:00", "1969-12-31 23:53:00", "1970-01-01 00:00:00"},
		{"EVERY = 7m", "2026-12-06 17:05:00", "2026-12-06 17:01:00", "2026-12-06 17:08:00"}, // 4 277 563 × 7m since 1970
	}
	for _, tt := range tests {
		c := mustParse(t, "[stage-a]\nPROGRAM = a\n[schedule-s]\nSTAGE = a\n"+tt.when+"\n")
		s := &c.Schedules[0]
		now := at(t, tt.now)
		if got := s.Latest(now); !got.Equal(at(t, tt.latest)) {
			t.Errorf("%s at %s: Latest = %v, want %s", tt.when, tt.now, got, tt.latest)
		}
		if got := s.Next(now); !got.Equal(at(t, tt.nxt)) {
			t.Errorf("%s at %s: Next = %v, want %s", tt.when, tt.now, got, tt.nxt)
		}
		// Sub-second parts do not move a slot, and neither does the
		// zone of the time given.
		if got := s.Latest(now.Add(999 * time.Millisecond).In(time.FixedZone("x", -7*3600))); !got.Equal(s.Latest(now)) {
			t.Errorf("%s at %s + 999ms in UTC-7: Latest = %v, want %v", tt.when, tt.now, got, s.Latest(now))
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	const stage = "[stage-a]\nPROGRAM = a\n"
	tests := []struct {
		name, src, want string
	}{
		{"malformed cron", stage + "[schedule-s]\nSTAGE = a\nCRON = */5 * * *\n",
			`pepsi.conf:5: CRON: bad cron expression "*/5 * * *": expected 5 to 6 fields, found 4: [*/5 * * *]`},
		{"cron out of range", stage + "[schedule-s]\nSTAGE = a\nCRON = 61 * * * *\n",
			`pepsi.conf:5: CRON: bad cron expression "61 * * * *": end of range (61) above maximum (59): 61`},
		{"cron never", stage + "[schedule-s]\nSTAGE = a\nCRON = 0 0 30 2 *\n",
			`pepsi.conf:5: CRON: "0 0 30 2 *" never comes (no time matches it within five years)`},
		{"cron @every", stage + "[schedule-s]\nSTAGE = a\nCRON = @every 5m\n",
			`pepsi.conf:5: CRON: bad cron expression "@every 5m": use EVERY = DURATION for an interval`},
		{"cron zone alone", stage + "[schedule-s]\nSTAGE = a\nCRON = TZ=UTC\n",
			`pepsi.conf:5: CRON: bad cron expression "TZ=UTC": nothing after the time zone`},
		{"cron unknown zone", stage + "[schedule-s]\nSTAGE = a\nCRON = TZ=Mars/Olympus 0 * * * *\n",
			`pepsi.conf:5: CRON: bad cron expression "TZ=Mars/Olympus 0 * * * *": provided bad location Mars/Olympus: unknown time zone Mars/Olympus`},
		{"both", stage + "[schedule-s]\nCRON = * * * * *\nSTAGE = a\nEVERY = 5m\n",
			`pepsi.conf:6: EVERY: give CRON or EVERY, not both (CRON at line 4)`},
		{"neither", stage + "[schedule-s]\nSTAGE = a\n",
			`pepsi.conf:3: no CRON or EVERY in [schedule-s] (give one: CRON = */5 * * * *, or EVERY = 5m)`},
		{"zero EVERY", stage + "[schedule-s]\nSTAGE = a\nEVERY = 0\n",
			`pepsi.conf:5: EVERY: must be greater than zero, not "0"`},
		{"negative EVERY", stage + "[schedule-s]\nSTAGE = a\nEVERY = -5m\n",
			`pepsi.conf:5: EVERY: must be greater than zero, not "-5m"`},
		{"bad EVERY", stage + "[schedule-s]\nSTAGE = a\nEVERY = often\n",
			`pepsi.conf:5: EVERY: bad duration "often" (want seconds or a duration such as 5m)`},
		{"EVERY not whole seconds", stage + "[schedule-s]\nSTAGE = a\nEVERY = 1.5s\n",
			`pepsi.conf:5: EVERY: must be whole seconds, not "1.5s"`},
		{"no STAGE", stage + "[schedule-s]\nEVERY = 5m\n",
			`pepsi.conf:3: no STAGE in [schedule-s] (the stage its messages are enqueued at)`},
		{"bad STAGE", stage + "[schedule-s]\nEVERY = 5m\nSTAGE = a b\n",
			`pepsi.conf:5: STAGE: bad stage name "a b" (want letters, digits, '_', '-' or '.')`},
		{"unknown STAGE", "[schedule-s]\nEVERY = 5m\nSTAGE = nosuch\n" + stage,
			`pepsi.conf:3: STAGE: unknown stage "nosuch" (no [stage-nosuch] section)`},
		{"bad PRIORITY", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nPRIORITY = high\n",
			`pepsi.conf:6: PRIORITY: bad priority "high" (want an integer from -2147483648 to 2147483647; lower is claimed first)`},
		{"PRIORITY out of range", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nPRIORITY = 2147483648\n",
			`pepsi.conf:6: PRIORITY: bad priority "2147483648" (want an integer from -2147483648 to 2147483647; lower is claimed first)`},
		{"HEADERS not JSON", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = source=cron\n",
			`pepsi.conf:6: HEADERS: bad JSON object source=cron (want a JSON object of strings, such as {"source": "cron"})`},
		{"HEADERS not strings", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = {\"n\": 1}\n",
			`pepsi.conf:6: HEADERS: header "n" is not a string in {"n": 1} (want a JSON object of strings, such as {"source": "cron"})`},
		{"HEADERS null", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = null\n",
			`pepsi.conf:6: HEADERS: bad JSON object null (want a JSON object of strings, such as {"source": "cron"})`},
		// What PostgreSQL's jsonb refuses (a NUL: SQLSTATE 22P05, and the
		// dispatcher's enqueue failed at every slot) or Go's decoder would
		// silently turn into U+FFFD.
		{"HEADERS NUL value", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = {\"a\": \"\\u0000\"}\n",
			`pepsi.conf:6: HEADERS: \u0000 (NUL) at byte 8: PostgreSQL's jsonb cannot hold it`},
		{"HEADERS NUL key", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = {\"x\\u0000\": \"b\"}\n",
			`pepsi.conf:6: HEADERS: \u0000 (NUL) at byte 4: PostgreSQL's jsonb cannot hold it`},
		{"HEADERS not UTF-8", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = {\"a\": \"\xff\xfe\"}\n",
			`pepsi.conf:6: HEADERS: byte 0xff at byte 8 is not UTF-8: PostgreSQL's jsonb cannot hold it`},
		{"HEADERS lone high surrogate", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = {\"a\": \"\\ud800x\"}\n",
			`pepsi.conf:6: HEADERS: \ud800 at byte 8 is half a surrogate pair: PostgreSQL's jsonb cannot hold it`},
		{"HEADERS lone low surrogate", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = {\"a\": \"\\uDC00\"}\n",
			`pepsi.conf:6: HEADERS: \uDC00 at byte 8 is half a surrogate pair: PostgreSQL's jsonb cannot hold it`},
		{"HEADERS two high surrogates", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = {\"a\": \"\\ud83d\\ud83d\"}\n",
			`pepsi.conf:6: HEADERS: \ud83d at byte 8 is half a surrogate pair: PostgreSQL's jsonb cannot hold it`},
		// TZ=Local is read as UTC by robfig/cron here, and a host's zone
		// would differ between dispatchers: refused, as an empty zone is.
		{"cron Local zone", stage + "[schedule-s]\nSTAGE = a\nCRON = TZ=Local 0 9 * * *\n",
			`pepsi.conf:5: CRON: bad cron expression "TZ=Local 0 9 * * *": TZ=Local is the zone of whichever host reads it, and the hosts that run dispatchers may differ (name the zone, such as TZ=Asia/Tokyo)`},
		{"cron Local zone CRON_TZ", stage + "[schedule-s]\nSTAGE = a\nCRON = CRON_TZ=Local 0 9 * * *\n",
			`pepsi.conf:5: CRON: bad cron expression "CRON_TZ=Local 0 9 * * *": CRON_TZ=Local is the zone of whichever host reads it, and the hosts that run dispatchers may differ (name the zone, such as CRON_TZ=Asia/Tokyo)`},
		{"cron empty zone", stage + "[schedule-s]\nSTAGE = a\nCRON = TZ= 0 9 * * *\n",
			`pepsi.conf:5: CRON: bad cron expression "TZ= 0 9 * * *": no zone after TZ=`},
		{"cron unknown zone CRON_TZ", stage + "[schedule-s]\nSTAGE = a\nCRON = CRON_TZ=local 0 9 * * *\n",
			`pepsi.conf:5: CRON: bad cron expression "CRON_TZ=local 0 9 * * *": provided bad location local: unknown time zone local`},
		{"bad schedule name", stage + "[schedule-a/b]\n",
			`pepsi.conf:3: bad schedule name "a/b" in [schedule-a/b] (want letters, digits, '_', '-' or '.')`},
		{"empty schedule name", stage + "[schedule-]\n",
			`pepsi.conf:3: bad schedule name "" in [schedule-] (want letters, digits, '_', '-' or '.')`},
		{"unknown key", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\nPROGRAM = x\n",
			`pepsi.conf:6: unknown key "PROGRAM" in [schedule-s]`},
		{"lower-case key", stage + "[schedule-s]\nSTAGE = a\nevery = 5m\n",
			`pepsi.conf:5: unknown key "every" in [schedule-s] (did you mean "EVERY"? keys are upper case)`},
		{"duplicate schedule", stage + "[schedule-s]\nSTAGE = a\nEVERY = 5m\n[schedule-s]\n",
			`pepsi.conf:6: duplicate section [schedule-s] (first at line 3)`},
	}
	for _, tt := range tests {
		_, err := Parse("pepsi.conf", []byte(tt.src))
		if err == nil {
			t.Errorf("%s: no error, want %q", tt.name, tt.want)
			continue
		}
		if _, ok := err.(*Error); !ok {
			t.Errorf("%s: %T, want *Error", tt.name, err)
		}
		// A cron error ends with what the expression may be; a zone's
		// says what to write.
		if got := err.Error(); got != tt.want && !strings.HasPrefix(got, tt.want+" (want 5 fields") &&
			!(strings.Contains(tt.name, "zone") && strings.HasPrefix(got, tt.want)) {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// TestScheduleManPage: pepsi.conf(5) has an entry for every key of
// [schedule-NAME] in its section (pkg/app's TestManConfigKeys reads the
// other sections' keys from parse.go's table).
func TestScheduleManPage(t *testing.T) {
	page, err := os.ReadFile("../../man/pepsi.conf.5")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(page), "\n.SS [schedule\\-NAME]\n")
	if !ok {
		t.Fatal(`pepsi.conf.5: no section ".SS [schedule\-NAME]"`)
	}
	sec, _, _ = strings.Cut(sec, "\n.S")
	for _, k := range scheduleKeys {
		if !regexp.MustCompile(`\n\.TP\n\.B ` + k + `\n`).MatchString(sec) {
			t.Errorf("pepsi.conf.5: key %s is not an entry of [schedule-NAME]", k)
		}
	}
}

// TestScheduleHeadersStorable: HEADERS that jsonb holds as written pass,
// an escaped backslash before "u0000" and a whole surrogate pair among
// them; PAYLOAD takes any bytes.
func TestScheduleHeadersStorable(t *testing.T) {
	for src, want := range map[string]map[string]string{
		`{"a": "\\u0000"}`:               {"a": `\u0000`},
		`{"a": "\\\u0041"}`:              {"a": `\A`},
		`{"a": "\ud83d\ude00 é \ufffd"}`: {"a": "😀 é \ufffd"},
		`{"\u00e9": "\u0001"}`:           {"é": "\x01"},
	} {
		c := mustParse(t, "[stage-a]\nPROGRAM = a\n[schedule-s]\nSTAGE = a\nEVERY = 5m\nHEADERS = "+src+"\n")
		if got := c.Schedules[0].Headers; !reflect.DeepEqual(got, want) {
			t.Errorf("HEADERS = %s: %q, want %q", src, got, want)
		}
	}
	// PAYLOAD is bytea: any bytes are stored as written.
	c := mustParse(t, "[stage-a]\nPROGRAM = a\n[schedule-s]\nSTAGE = a\nEVERY = 5m\nPAYLOAD = a\x00b\xff\n")
	if got := string(c.Schedules[0].Payload); got != "a\x00b\xff" {
		t.Errorf("PAYLOAD: %q", got)
	}
}
