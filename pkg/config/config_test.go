package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// specExample is the pepsi.conf of SPEC §3, verbatim.
const specExample = `[database]
DSN = postgres:///pepsi?host=/var/run/postgresql

[pepsi-dispatch]
MAX_RUNTIME = 300          ; seconds, or a duration such as 5m
WORKER_IDLE_TIMEOUT = 5
POLL_INTERVAL = 30
STATS_INTERVAL = 60

[stage-parse]
PROGRAM = /usr/lib/pepsi/parse --strict
PARALLELISM = 4
QUEUE_LIMIT = 4
MAX_MESSAGES = 1000
`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse("pepsi.conf", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return c
}

func TestSpecExample(t *testing.T) {
	c := mustParse(t, specExample)
	want := &Config{
		Path: "pepsi.conf",
		DSN:  "postgres:///pepsi?host=/var/run/postgresql",
		Dispatch: Dispatch{
			MaxRuntime:        300 * time.Second,
			WorkerIdleTimeout: 5 * time.Second,
			PollInterval:      30 * time.Second,
			StatsInterval:     60 * time.Second,
			ConfigFile:        "pepsi.conf",
			IngressChannel:    "pepsi_ingress",
			ShutdownGrace:     10 * time.Second,
			SpawnCooldown:     5 * time.Second,
			Retention:         168 * time.Hour,
			OrphanSweep:       time.Minute,
			ReconnectMin:      time.Second,
			ReconnectMax:      30 * time.Second,
			VacuumInterval:    2 * time.Second,
		},
		Stages: []Stage{{
			Name:        "parse",
			Program:     []string{"/usr/lib/pepsi/parse", "--strict"},
			ProgramText: "/usr/lib/pepsi/parse --strict",
			Parallelism: 4,
			QueueLimit:  4,
			MaxMessages: 1000,
			RetryDelay:  10 * time.Second,
			RetryMax:    time.Hour,
			KeyLimit:    1,
			JoinPolicy:  JoinFail,
			Line:        10,
		}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestDefaults(t *testing.T) {
	d := Default()
	want := &Config{Dispatch: Dispatch{
		MaxRuntime:        300 * time.Second,
		WorkerIdleTimeout: 5 * time.Second,
		PollInterval:      30 * time.Second,
		StatsInterval:     60 * time.Second,
		IngressChannel:    "pepsi_ingress",
		ShutdownGrace:     10 * time.Second,
		SpawnCooldown:     5 * time.Second,
		Retention:         7 * 24 * time.Hour,
		OrphanSweep:       time.Minute,
		ReconnectMin:      time.Second,
		ReconnectMax:      30 * time.Second,
		VacuumInterval:    2 * time.Second,
	}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Default() = %+v\nwant %+v", d, want)
	}

	// An empty file and a file with only empty sections give the same
	// defaults, with Path and ConfigFile set to the file.
	for _, src := range []string{"", "\n", "; nothing\n# at all", "[database]\n[pepsi-dispatch]\n"} {
		c := mustParse(t, src)
		want.Path, want.Dispatch.ConfigFile = "pepsi.conf", "pepsi.conf"
		if !reflect.DeepEqual(c, want) {
			t.Errorf("Parse(%q) = %+v\nwant %+v", src, c, want)
		}
	}

	// A stage with nothing but PROGRAM gets the default limits.
	c := mustParse(t, "[stage-a]\nPROGRAM = a\n")
	s, ok := c.Stage("a")
	if !ok {
		t.Fatal("stage a not found")
	}
	if s.Parallelism != 4 || s.QueueLimit != 4 || s.MaxMessages != 1000 || s.Line != 1 {
		t.Errorf("stage defaults: %+v", *s)
	}
}

func TestAllKeys(t *testing.T) {
	c := mustParse(t, `
[pepsi-dispatch]
MAX_RUNTIME = 5m
WORKER_IDLE_TIMEOUT = 0.5
POLL_INTERVAL = 1h30m
STATS_INTERVAL = 2.5s
CONFIG_FILE = /etc/pepsi/workers.conf
INGRESS_CHANNEL = my_channel_2
SHUTDOWN_GRACE = 3
SPAWN_COOLDOWN = 250ms
RETENTION = 0
METRICS_LISTEN = 127.0.0.1:9187
ORPHAN_SWEEP = 2m
RECONNECT_MIN = 0.25
RECONNECT_MAX = 10s

[database]
DSN = "postgres://u:p#w;d@db/pepsi"   ; quoted: keeps # and ;

[stage-b.2_x-y]
MAX_MESSAGES = 7
QUEUE_LIMIT = 1
PARALLELISM = 16
RETRIES = 3
RETRY_DELAY = 2s
RETRY_DELAY_MAX = 1m
RATE = 50/s
KEY = header:customer
KEY_LIMIT = 2
JOIN_POLICY = all
PROGRAM = "/opt/my tools/b" -v  --name='a b' "" \#notacomment # comment
`)
	wantD := Dispatch{
		MaxRuntime:        5 * time.Minute,
		WorkerIdleTimeout: 500 * time.Millisecond,
		PollInterval:      90 * time.Minute,
		StatsInterval:     2500 * time.Millisecond,
		ConfigFile:        "/etc/pepsi/workers.conf",
		IngressChannel:    "my_channel_2",
		ShutdownGrace:     3 * time.Second,
		SpawnCooldown:     250 * time.Millisecond,
		Retention:         0,
		MetricsListen:     "127.0.0.1:9187",
		OrphanSweep:       2 * time.Minute,
		ReconnectMin:      250 * time.Millisecond,
		ReconnectMax:      10 * time.Second,
		VacuumInterval:    2 * time.Second,
	}
	if c.Dispatch != wantD {
		t.Errorf("Dispatch = %+v\nwant %+v", c.Dispatch, wantD)
	}
	if c.DSN != "postgres://u:p#w;d@db/pepsi" {
		t.Errorf("DSN = %q", c.DSN)
	}
	wantS := []Stage{{
		Name:        "b.2_x-y",
		Program:     []string{"/opt/my tools/b", "-v", "--name=a b", "", "#notacomment"},
		ProgramText: `"/opt/my tools/b" -v  --name='a b' "" \#notacomment`,
		Parallelism: 16,
		QueueLimit:  1,
		MaxMessages: 7,
		Retries:     3,
		RetryDelay:  2 * time.Second,
		RetryMax:    time.Minute,
		Rate:        Rate{Count: 50, Per: time.Second},
		KeyHeader:   "customer",
		KeyLimit:    2,
		KeyLine:     29,
		JoinPolicy:  JoinAll,
		Line:        20, // the raw string starts with a newline
	}}
	if !reflect.DeepEqual(c.Stages, wantS) {
		t.Errorf("Stages = %+v\nwant %+v", c.Stages, wantS)
	}
}

func TestValues(t *testing.T) {
	// How values are read: inline comments, quotes, CRLF, BOM.
	tests := []struct {
		name, src, dsn string
	}{
		{"plain", "[database]\nDSN = host=/tmp dbname=pepsi\n", "host=/tmp dbname=pepsi"},
		{"no spaces", "[database]\nDSN=x\n", "x"},
		{"comment after space", "[database]\nDSN = x ; comment\n", "x"},
		{"hash comment after space", "[database]\nDSN = x # comment\n", "x"},
		{"hash without space kept", "[database]\nDSN = postgres://u:p#w@h/db\n", "postgres://u:p#w@h/db"},
		{"semicolon without space kept", "[database]\nDSN = a;b\n", "a;b"},
		{"double quoted", "[database]\nDSN = \"a ; b\" ; c\n", "a ; b"},
		{"single quoted", "[database]\nDSN = 'a # b'\n", "a # b"},
		{"empty", "[database]\nDSN =\n", ""},
		{"CRLF", "[database]\r\nDSN = x\r\n", "x"},
		{"BOM", "\xEF\xBB\xBF[database]\nDSN = x\n", "x"},
		{"indented", "  [database]\n\tDSN = x\n", "x"},
		{"no final newline", "[database]\nDSN = x", "x"},
		{"triple quoted", "[database]\nDSN = \"\"\"a\nb\"\"\"\n", "a\nb"},
		{"triple quoted, then a comment", "[database]\nDSN = \"\"\"a ; b\"\"\" ; c\n", "a ; b"},
		{"backquoted", "[database]\nDSN = `a # b`\n", "a # b"},
		{"header comment", "[database] ; the db\nDSN = x\n", "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.src)
			if c.DSN != tt.dsn {
				t.Errorf("DSN = %q, want %q", c.DSN, tt.dsn)
			}
		})
	}
}

func TestDurations(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"300", 300 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{".25", 250 * time.Millisecond},
		{"1.", time.Second},
		{"+2", 2 * time.Second},
		{"5m", 5 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"100ms", 100 * time.Millisecond},
		{"0.000000001", time.Nanosecond},
	}
	for _, tt := range tests {
		c, err := Parse("p.conf", []byte("[pepsi-dispatch]\nMAX_RUNTIME = "+tt.in+"\n"))
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if c.Dispatch.MaxRuntime != tt.want {
			t.Errorf("%q = %v, want %v", tt.in, c.Dispatch.MaxRuntime, tt.want)
		}
	}
}

func TestKeys(t *testing.T) {
	c := mustParse(t, "[stage-a]\nPROGRAM = a\nKEY = header: customer.id\nKEY_LIMIT = 3\n[stage-b]\nPROGRAM = b\nKEY = header:X-Tenant\n[stage-c]\nPROGRAM = c\n")
	for i, want := range []struct {
		header string
		limit  int
		keyed  bool
	}{{"customer.id", 3, true}, {"X-Tenant", 1, true}, {"", 1, false}} {
		st := &c.Stages[i]
		if st.KeyHeader != want.header || st.KeyLimit != want.limit || st.Keyed() != want.keyed {
			t.Errorf("%s: KEY %q KEY_LIMIT %d keyed %v, want %+v", st.Name, st.KeyHeader, st.KeyLimit, st.Keyed(), want)
		}
	}
}

func TestRates(t *testing.T) {
	tests := []struct {
		in   string
		want Rate
	}{
		{"50/s", Rate{50, time.Second}},
		{"1/m", Rate{1, time.Minute}},
		{"3600/h", Rate{3600, time.Hour}},
		{"7 / s", Rate{7, time.Second}},
		{"200/s   ; at most", Rate{200, time.Second}},
		{"+5/s", Rate{5, time.Second}},
	}
	for _, tt := range tests {
		c, err := Parse("p.conf", []byte("[stage-a]\nPROGRAM = a\nRATE = "+tt.in+"\n"))
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if got := c.Stages[0].Rate; got != tt.want || !got.Limited() {
			t.Errorf("%q = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	if r := mustParse(t, "[stage-a]\nPROGRAM = a\n").Stages[0].Rate; r.Limited() || r.String() != "" {
		t.Errorf("no RATE: %+v %q, want no limit", r, r.String())
	}
	for r, want := range map[Rate]string{{50, time.Second}: "50/s", {1, time.Minute}: "1/m", {3, time.Hour}: "3/h"} {
		if r.String() != want {
			t.Errorf("%+v.String() = %q, want %q", r, r.String(), want)
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		// Stage sets.
		{"unknown stage in STAGES", "[pepsi-dispatch]\nSTAGES = a, nosuch\n[stage-a]\nPROGRAM = a\n",
			`pepsi.conf:2: STAGES: unknown stage "nosuch" (no [stage-nosuch] section)`},
		{"stage twice in STAGES", "[stage-a]\nPROGRAM = a\n[pepsi-dispatch]\nSTAGES = a,a\n",
			`pepsi.conf:4: STAGES: stage "a" given twice`},
		{"empty STAGES", "[pepsi-dispatch]\nSTAGES =\n[stage-a]\nPROGRAM = a\n",
			`pepsi.conf:2: STAGES: no stage given (leave it out for every stage)`},
		{"empty name in STAGES", "[pepsi-dispatch]\nSTAGES = a,,b\n[stage-a]\nPROGRAM = a\n",
			`pepsi.conf:2: STAGES: empty stage name in "a,,b"`},
		// Retries.
		{"negative RETRIES", "[stage-a]\nPROGRAM = a\nRETRIES = -1\n",
			`pepsi.conf:3: RETRIES: bad number "-1" (want an integer >= 0)`},
		{"bad RETRY_DELAY", "[stage-a]\nPROGRAM = a\nRETRY_DELAY = soon\n",
			`pepsi.conf:3: RETRY_DELAY: bad duration "soon" (want seconds or a duration such as 5m)`},
		{"zero RECONNECT_MAX", "[pepsi-dispatch]\nRECONNECT_MAX = 0\n",
			`pepsi.conf:2: RECONNECT_MAX: must be greater than zero, not "0"`},
		{"RECONNECT_MIN above the default RECONNECT_MAX", "[pepsi-dispatch]\nRECONNECT_MIN = 1m\n",
			`pepsi.conf:2: RECONNECT_MIN (1m0s) is longer than RECONNECT_MAX (30s)`},
		{"RECONNECT_MAX below RECONNECT_MIN", "[pepsi-dispatch]\nRECONNECT_MIN = 5\nPOLL_INTERVAL = 9\nRECONNECT_MAX = 2\n",
			`pepsi.conf:4: RECONNECT_MIN (5s) is longer than RECONNECT_MAX (2s)`},
		// Sections.
		{"unknown section", "[database]\nDSN = x\n[foo]\n",
			`pepsi.conf:3: unknown section [foo] (want [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])`},
		{"sections are case-sensitive", "[Database]\n",
			`pepsi.conf:1: unknown section [Database] (want [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])`},
		{"explicit DEFAULT", "[DEFAULT]\n",
			`pepsi.conf:1: unknown section [DEFAULT] (want [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])`},
		{"unclosed header", "\n[database\n", `pepsi.conf:2: unclosed section header "[database"`},
		{"empty header", "[]\n", `pepsi.conf:1: unknown section [] (want [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])`},
		{"junk after header", "[database] x\n", `pepsi.conf:1: unexpected "x" after [database]`},
		{"duplicate section", "[database]\nDSN = a\n\n[database]\n",
			`pepsi.conf:4: duplicate section [database] (first at line 1)`},
		{"duplicate stage", "[stage-a]\nPROGRAM = a\n[stage-b]\nPROGRAM = b\n[stage-a]\nPROGRAM = c\n",
			`pepsi.conf:5: duplicate section [stage-a] (first at line 1)`},
		{"empty stage name", "[stage-]\nPROGRAM = a\n",
			`pepsi.conf:1: bad stage name "" in [stage-] (want letters, digits, '_', '-' or '.')`},
		{"bad stage name", "[stage-a b]\nPROGRAM = a\n",
			`pepsi.conf:1: bad stage name "a b" in [stage-a b] (want letters, digits, '_', '-' or '.')`},
		{"bad stage name slash", "[stage-a/b]\n",
			`pepsi.conf:1: bad stage name "a/b" in [stage-a/b] (want letters, digits, '_', '-' or '.')`},
		{"64-byte stage name", "[database]\n[stage-" + strings.Repeat("s", 64) + "]\nPROGRAM = a\n",
			`pepsi.conf:2: bad stage name "` + strings.Repeat("s", 64) + `" in [stage-` + strings.Repeat("s", 64) + `] (want at most 63 bytes, not 64)`},
		{"70-byte stage name", "[stage-" + strings.Repeat("s", 70) + "]\nPROGRAM = a\n",
			`pepsi.conf:1: bad stage name "` + strings.Repeat("s", 70) + `" in [stage-` + strings.Repeat("s", 70) + `] (want at most 63 bytes, not 70)`},
		{"stage name with a colon", "[stage-a:b]\n",
			`pepsi.conf:1: bad stage name "a:b" in [stage-a:b] (want letters, digits, '_', '-' or '.')`},

		// Keys.
		{"key before any section", "DSN = x\n",
			`pepsi.conf:1: key "DSN" outside any section (put it under [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])`},
		{"unknown key", "[pepsi-dispatch]\n" + strings.Repeat("\n", 10) + "MAX_RUNTME = 5\n",
			`pepsi.conf:12: unknown key "MAX_RUNTME" in [pepsi-dispatch]`},
		{"lower-case key", "[database]\ndsn = x\n",
			`pepsi.conf:2: unknown key "dsn" in [database] (did you mean "DSN"? keys are upper case)`},
		{"stage key in dispatch", "[pepsi-dispatch]\nPROGRAM = x\n",
			`pepsi.conf:2: unknown key "PROGRAM" in [pepsi-dispatch]`},
		{"dispatch key in stage", "[stage-a]\nPROGRAM = a\nMAX_RUNTIME = 5\n",
			`pepsi.conf:3: unknown key "MAX_RUNTIME" in [stage-a]`},
		{"quoted key name", "[database]\n\"DSN\" = x\n", `pepsi.conf:2: unknown key "\"DSN\"" in [database]`},
		{"auto-increment key", "[database]\n- = x\n", `pepsi.conf:2: unknown key "-" in [database]`},
		{"duplicate key", "[database]\nDSN = a\n; again\nDSN = b\n",
			`pepsi.conf:4: duplicate key "DSN" in [database] (first at line 2)`},
		{"duplicate stage key", "[stage-a]\nPROGRAM = a\nPROGRAM = b\n",
			`pepsi.conf:3: duplicate key "PROGRAM" in [stage-a] (first at line 2)`},
		{"no delimiter", "[database]\npostgres://x\n",
			`pepsi.conf:2: want KEY = value, a [section] header or a comment, not "postgres://x"`},
		{"colon is not a delimiter", "[database]\nDSN: x\n",
			`pepsi.conf:2: want KEY = value, a [section] header or a comment, not "DSN: x"`},
		{"empty key name", "[database]\n= x\n", `pepsi.conf:2: missing key name before '='`},
		{"unclosed triple quote", "[database]\nDSN = \"\"\"abc\nmore\n",
			`pepsi.conf:2: DSN: no closing """ for the value`},
		{"unclosed backtick", "[database]\nDSN = `abc",
			"pepsi.conf:2: DSN: no closing ` for the value"},
		{"line numbers after multi-line value", "[database]\nDSN = `a\nb\nc`\nFOO = 1\n",
			`pepsi.conf:5: unknown key "FOO" in [database]`},
		{"line numbers with CRLF", "[database]\r\nDSN = x\r\n\r\nFOO = 1\r\n",
			`pepsi.conf:4: unknown key "FOO" in [database]`},
		{"continuation is not supported", "[database]\nDSN = a \\\n  b\n",
			`pepsi.conf:3: want KEY = value, a [section] header or a comment, not "b"`},

		// Durations.
		{"bad duration", "[pepsi-dispatch]\n\n\n\n\n\nMAX_RUNTIME = abc\n",
			`pepsi.conf:7: MAX_RUNTIME: bad duration "abc" (want seconds or a duration such as 5m)`},
		{"empty duration", "[pepsi-dispatch]\nPOLL_INTERVAL =\n",
			`pepsi.conf:2: POLL_INTERVAL: bad duration "" (want seconds or a duration such as 5m)`},
		{"duration with space", "[pepsi-dispatch]\nPOLL_INTERVAL = 5 m\n",
			`pepsi.conf:2: POLL_INTERVAL: bad duration "5 m" (want seconds or a duration such as 5m)`},
		{"exponent", "[pepsi-dispatch]\nPOLL_INTERVAL = 1e3\n",
			`pepsi.conf:2: POLL_INTERVAL: bad duration "1e3" (want seconds or a duration such as 5m)`},
		{"duration overflow", "[pepsi-dispatch]\nPOLL_INTERVAL = 99999999999999999999\n",
			`pepsi.conf:2: POLL_INTERVAL: bad duration "99999999999999999999" (want seconds or a duration such as 5m)`},
		{"tab before comment", "[pepsi-dispatch]\nPOLL_INTERVAL = 5\t; c\n",
			`pepsi.conf:2: POLL_INTERVAL: bad duration "5\t; c" (want seconds or a duration such as 5m)`},
		{"zero MAX_RUNTIME", "[pepsi-dispatch]\nMAX_RUNTIME = 0\n",
			`pepsi.conf:2: MAX_RUNTIME: must be greater than zero, not "0"`},
		{"zero WORKER_IDLE_TIMEOUT", "[pepsi-dispatch]\nWORKER_IDLE_TIMEOUT = 0s\n",
			`pepsi.conf:2: WORKER_IDLE_TIMEOUT: must be greater than zero, not "0s"`},
		{"negative POLL_INTERVAL", "[pepsi-dispatch]\nPOLL_INTERVAL = -1\n",
			`pepsi.conf:2: POLL_INTERVAL: must be greater than zero, not "-1"`},
		{"negative STATS_INTERVAL", "[pepsi-dispatch]\nSTATS_INTERVAL = -5m\n",
			`pepsi.conf:2: STATS_INTERVAL: must be greater than zero, not "-5m"`},
		{"zero SHUTDOWN_GRACE", "[pepsi-dispatch]\nSHUTDOWN_GRACE = 0.0\n",
			`pepsi.conf:2: SHUTDOWN_GRACE: must be greater than zero, not "0.0"`},
		{"zero SPAWN_COOLDOWN", "[pepsi-dispatch]\nSPAWN_COOLDOWN = 0\n",
			`pepsi.conf:2: SPAWN_COOLDOWN: must be greater than zero, not "0"`},
		{"negative RETENTION", "[pepsi-dispatch]\nRETENTION = -1h\n",
			`pepsi.conf:2: RETENTION: must not be negative, not "-1h" (0 turns it off)`},
		{"bad RETENTION", "[pepsi-dispatch]\nRETENTION = forever\n",
			`pepsi.conf:2: RETENTION: bad duration "forever" (want seconds or a duration such as 5m)`},

		// Other dispatch keys.
		{"bad channel", "[pepsi-dispatch]\nINGRESS_CHANNEL = pepsi-ingress\n",
			`pepsi.conf:2: INGRESS_CHANNEL: bad channel name "pepsi-ingress" (want a letter or '_', then letters, digits or '_'; at most 63)`},
		{"channel starting with digit", "[pepsi-dispatch]\nINGRESS_CHANNEL = 1abc\n",
			`pepsi.conf:2: INGRESS_CHANNEL: bad channel name "1abc" (want a letter or '_', then letters, digits or '_'; at most 63)`},
		{"channel too long", "[pepsi-dispatch]\nINGRESS_CHANNEL = " + strings.Repeat("a", 64) + "\n",
			`pepsi.conf:2: INGRESS_CHANNEL: bad channel name "` + strings.Repeat("a", 64) + `" (want a letter or '_', then letters, digits or '_'; at most 63)`},
		{"empty channel", "[pepsi-dispatch]\nINGRESS_CHANNEL =\n",
			`pepsi.conf:2: INGRESS_CHANNEL: bad channel name "" (want a letter or '_', then letters, digits or '_'; at most 63)`},
		{"bad listen address", "[pepsi-dispatch]\nMETRICS_LISTEN = 9187\n",
			`pepsi.conf:2: METRICS_LISTEN: bad address "9187" (want HOST:PORT or :PORT, or nothing for off)`},
		{"listen without port", "[pepsi-dispatch]\nMETRICS_LISTEN = localhost:\n",
			`pepsi.conf:2: METRICS_LISTEN: bad address "localhost:" (want HOST:PORT or :PORT, or nothing for off)`},

		// Stage numbers.
		{"zero PARALLELISM", "[stage-a]\nPROGRAM = a\nPARALLELISM = 0\n",
			`pepsi.conf:3: PARALLELISM: must be an integer >= 1, not "0"`},
		{"negative QUEUE_LIMIT", "[stage-a]\nPROGRAM = a\nQUEUE_LIMIT = -4\n",
			`pepsi.conf:3: QUEUE_LIMIT: must be an integer >= 1, not "-4"`},
		{"bad MAX_MESSAGES", "[stage-a]\nPROGRAM = a\nMAX_MESSAGES = lots\n",
			`pepsi.conf:3: MAX_MESSAGES: bad number "lots" (want an integer >= 1)`},
		{"decimal PARALLELISM", "[stage-a]\nPROGRAM = a\nPARALLELISM = 1.5\n",
			`pepsi.conf:3: PARALLELISM: bad number "1.5" (want an integer >= 1)`},
		{"empty QUEUE_LIMIT", "[stage-a]\nPROGRAM = a\nQUEUE_LIMIT =\n",
			`pepsi.conf:3: QUEUE_LIMIT: bad number "" (want an integer >= 1)`},
		{"huge MAX_MESSAGES", "[stage-a]\nPROGRAM = a\nMAX_MESSAGES = 99999999999999999999\n",
			`pepsi.conf:3: MAX_MESSAGES: "99999999999999999999" is out of range (want an integer >= 1)`},

		// RATE.
		{"RATE not a rate", "[stage-a]\nPROGRAM = a\nRATE = fast\n",
			`pepsi.conf:3: RATE: bad rate "fast" (want COUNT/s, COUNT/m or COUNT/h, such as 50/s)`},
		{"RATE without a period", "[stage-a]\nPROGRAM = a\nRATE = 50\n",
			`pepsi.conf:3: RATE: bad rate "50" (want COUNT/s, COUNT/m or COUNT/h, such as 50/s)`},
		{"zero RATE", "[stage-a]\nPROGRAM = a\n\nRATE = 0/s\n",
			`pepsi.conf:4: RATE: the count must be an integer >= 1, not "0/s"`},
		{"negative RATE", "[stage-a]\nPROGRAM = a\nRATE = -1/s\n",
			`pepsi.conf:3: RATE: the count must be an integer >= 1, not "-1/s"`},
		{"RATE a day", "[stage-a]\nPROGRAM = a\nRATE = 5/d\n",
			`pepsi.conf:3: RATE: bad period "d" in "5/d" (want s, m or h)`},
		{"RATE a duration", "[stage-a]\nPROGRAM = a\nRATE = 5/1s\n",
			`pepsi.conf:3: RATE: bad period "1s" in "5/1s" (want s, m or h)`},
		{"decimal RATE", "[stage-a]\nPROGRAM = a\nRATE = 2.5/s\n",
			`pepsi.conf:3: RATE: bad count "2.5" in "2.5/s" (want an integer >= 1 before the '/')`},
		{"empty RATE", "[stage-a]\nPROGRAM = a\nRATE =\n",
			`pepsi.conf:3: RATE: bad rate "" (want COUNT/s, COUNT/m or COUNT/h, such as 50/s)`},
		{"huge RATE", "[stage-a]\nPROGRAM = a\nRATE = 99999999999999999999/s\n",
			`pepsi.conf:3: RATE: "99999999999999999999/s" is out of range (want an integer >= 1 before the '/')`},
		// KEY and KEY_LIMIT.
		{"KEY payload", "[stage-a]\nPROGRAM = a\nKEY = payload\n",
			`pepsi.conf:3: KEY: bad key "payload" (want header:NAME, such as header:customer)`},
		{"KEY a column", "[stage-a]\nPROGRAM = a\nKEY = column:customer\n",
			`pepsi.conf:3: KEY: bad key "column:customer" (want header:NAME, such as header:customer)`},
		{"KEY without a name", "[stage-a]\nPROGRAM = a\nKEY = header:\n",
			`pepsi.conf:3: KEY: bad header name "" in "header:" (want a header's name: no spaces, at most 255 bytes)`},
		{"KEY_LIMIT 0", "[stage-a]\nPROGRAM = a\nKEY = header:customer\nKEY_LIMIT = 0\n",
			`pepsi.conf:4: KEY_LIMIT: must be an integer >= 1, not "0"`},
		{"KEY_LIMIT many", "[stage-a]\nPROGRAM = a\nKEY = header:customer\nKEY_LIMIT = many\n",
			`pepsi.conf:4: KEY_LIMIT: bad number "many" (want an integer >= 1)`},
		{"KEY_LIMIT without KEY", "[stage-a]\nPROGRAM = a\n\nKEY_LIMIT = 2\n",
			`pepsi.conf:4: KEY_LIMIT without KEY in [stage-a] (KEY = header:NAME names what it limits)`},
		{"JOIN_POLICY unknown", "[stage-a]\nPROGRAM = a\nJOIN_POLICY = some\n",
			`pepsi.conf:3: JOIN_POLICY: "some" is not a policy (want fail or all)`},
		{"TRACE unknown", "[stage-a]\nPROGRAM = a\nTRACE = parent\n",
			`pepsi.conf:3: TRACE: "parent" is not a relationship (want child or link)`},
		{"TRACING yes", "[pepsi-dispatch]\nTRACING = yes\n[stage-a]\nPROGRAM = a\n",
			`pepsi.conf:2: TRACING: "yes" is not on or off`},
		{"TRACE_URL without trace_id", "[pepsi-httpd]\nTRACE_URL = http://jaeger/trace/\n[stage-a]\nPROGRAM = a\n",
			`pepsi.conf:2: TRACE_URL: "http://jaeger/trace/" has no {trace_id} (want a URL with {trace_id} where the trace id goes)`},
		{"lower-case RATE", "[stage-a]\nPROGRAM = a\nrate = 5/s\n",
			`pepsi.conf:3: unknown key "rate" in [stage-a] (did you mean "RATE"? keys are upper case)`},
		{"RATE in dispatch", "[pepsi-dispatch]\nRATE = 5/s\n",
			`pepsi.conf:2: unknown key "RATE" in [pepsi-dispatch]`},

		// PROGRAM.
		{"no PROGRAM", "[stage-a]\nPROGRAM = a\n\n[stage-b]\nPARALLELISM = 2\n[database]\n",
			`pepsi.conf:4: no PROGRAM in [stage-b]`},
		{"no PROGRAM, empty section at end", "[stage-a]\n",
			`pepsi.conf:1: no PROGRAM in [stage-a]`},
		{"empty PROGRAM", "[stage-a]\nPROGRAM =\n", `pepsi.conf:2: PROGRAM is empty in [stage-a]`},
		{"PROGRAM only a comment", "[stage-a]\nPROGRAM = ; later\n", `pepsi.conf:2: PROGRAM is empty in [stage-a]`},
		{"PROGRAM only blanks in quotes", "[stage-a]\nPROGRAM = \"\"\"  \"\"\"\n", `pepsi.conf:2: PROGRAM is empty in [stage-a]`},
		{"unbalanced single quote", "[stage-a]\nPROGRAM = /bin/a 'b\n",
			`pepsi.conf:2: PROGRAM: unterminated ' quote in "/bin/a 'b"`},
		{"unbalanced double quote", "[stage-a]\nPROGRAM = /bin/a \"b c\n",
			`pepsi.conf:2: PROGRAM: unterminated " quote in "/bin/a \"b c"`},
		{"trailing backslash", "[stage-a]\nPROGRAM = /bin/a \\\n",
			`pepsi.conf:2: PROGRAM: trailing backslash (lines cannot be continued) in "/bin/a \\"`},
		{"NUL in PROGRAM", "[stage-a]\nPROGRAM = /bin/a\x00b\n", `pepsi.conf:2: PROGRAM: contains a NUL byte`},

		{"first error wins", "[foo]\n[bar]\n", `pepsi.conf:1: unknown section [foo] (want [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("pepsi.conf", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error; got %+v", c)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error: %v", err, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tt := range []struct {
		e    Error
		want string
	}{
		{Error{File: "/etc/pepsi/pepsi.conf", Line: 3, Msg: "m"}, "/etc/pepsi/pepsi.conf:3: m"},
		{Error{File: "a.conf", Msg: "m"}, "a.conf: m"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	_, err := Parse("/some/where/pepsi.conf", []byte("[x]\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "/some/where/pepsi.conf:1: ") {
		t.Errorf("file name not used as given: %v", err)
	}
}

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		text    string // ProgramText; "" means same as in
		wantErr string
	}{
		{in: "/bin/true", want: []string{"/bin/true"}},
		{in: "a  b\tc", want: []string{"a", "b", "c"}},
		{in: "a 'b c' d", want: []string{"a", "b c", "d"}},
		{in: `a "b c" d`, want: []string{"a", "b c", "d"}},
		{in: `a "b \"c\" \\ \$ \x"`, want: []string{"a", `b "c" \ $ \x`}},
		{in: `a 'b \n "c"'`, want: []string{"a", `b \n "c"`}},
		{in: `a\ b c\\d \'e`, want: []string{"a b", `c\d`, "'e"}},
		{in: `pre'quoted'"joined"post`, want: []string{"prequotedjoinedpost"}},
		{in: `a '' ""`, want: []string{"a", "", ""}},
		{in: `a $HOME ~ *.txt`, want: []string{"a", "$HOME", "~", "*.txt"}},
		{in: `a b#c d;e`, want: []string{"a", "b#c", "d;e"}},
		{in: `a #comment 'unbalanced`, want: []string{"a"}, text: "a"},
		{in: `a ;comment`, want: []string{"a"}, text: "a"},
		{in: `a	;tab comment`, want: []string{"a"}, text: "a"},
		{in: `a '#x' "; y" \#z`, want: []string{"a", "#x", "; y", "#z"}},
		{in: `'/opt/my prog'`, want: []string{"/opt/my prog"}},
		{in: `"/opt/my prog"`, want: []string{"/opt/my prog"}},
		{in: "a 'b\nc' \"d\\\ne\" f\\\ng", want: []string{"a", "b\nc", "de", "fg"}},
		{in: `a 'b`, wantErr: "unterminated ' quote"},
		{in: `a "b`, wantErr: `unterminated " quote`},
		{in: `a "b\"`, wantErr: `unterminated " quote`},
		{in: `a \`, wantErr: "trailing backslash (lines cannot be continued)"},
		{in: ``, want: nil},
	}
	for _, tt := range tests {
		words, end, err := splitWords(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("splitWords(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("splitWords(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(words, tt.want) {
			t.Errorf("splitWords(%q) = %q, want %q", tt.in, words, tt.want)
		}
		text := tt.text
		if text == "" {
			text = tt.in
		}
		if got := strings.TrimSpace(tt.in[:end]); got != text {
			t.Errorf("splitWords(%q) text = %q, want %q", tt.in, got, text)
		}
	}
}

func TestProgramInFile(t *testing.T) {
	// Through the whole parser: PROGRAM reaches splitWords with its quotes
	// and comment.
	tests := []struct {
		line string
		want []string
		text string
	}{
		{`PROGRAM = /bin/x 'a #b' ; comment`, []string{"/bin/x", "a #b"}, `/bin/x 'a #b'`},
		{`PROGRAM = "/opt/my prog"`, []string{"/opt/my prog"}, `"/opt/my prog"`},
		{`PROGRAM = '/opt/my prog' --x`, []string{"/opt/my prog", "--x"}, `'/opt/my prog' --x`},
		{`PROGRAM = x --sep=; --y=#`, []string{"x", "--sep=;", "--y=#"}, `x --sep=; --y=#`},
		{`PROGRAM = x "a ; b" # c`, []string{"x", "a ; b"}, `x "a ; b"`},
		{"PROGRAM = \"\"\"x 'a b'\n  --c\"\"\"", []string{"x", "a b", "--c"}, "x 'a b'\n  --c"},
		{"PROGRAM = `x \"y z\"`", []string{"x", "y z"}, `x "y z"`},
	}
	for _, tt := range tests {
		c := mustParse(t, "[stage-s]\n"+tt.line+"\n")
		s := c.Stages[0]
		if !reflect.DeepEqual(s.Program, tt.want) || s.ProgramText != tt.text {
			t.Errorf("%s\n got %q %q\nwant %q %q", tt.line, s.Program, s.ProgramText, tt.want, tt.text)
		}
	}
}

func TestStages(t *testing.T) {
	c := mustParse(t, "[stage-c]\nPROGRAM = c\n[database]\nDSN = x\n[stage-a]\nPROGRAM = a\nPARALLELISM = 2\n[stage-b]\nPROGRAM = b\n")
	if got, want := c.StageNames(), []string{"c", "a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("StageNames() = %q, want %q", got, want)
	}
	s, ok := c.Stage("a")
	if !ok || s.Name != "a" || s.Parallelism != 2 || s.Line != 5 {
		t.Errorf("Stage(a) = %+v, %v", s, ok)
	}
	s.QueueLimit = 9 // points into c.Stages
	if c.Stages[1].QueueLimit != 9 {
		t.Error("Stage does not return a pointer into Stages")
	}
	if s, ok := c.Stage("nope"); ok || s != nil {
		t.Errorf("Stage(nope) = %v, %v", s, ok)
	}
	if got := Default().StageNames(); len(got) != 0 {
		t.Errorf("Default().StageNames() = %q", got)
	}
}

func TestStageNameLength(t *testing.T) {
	// The status line's next:NAME reaches at most 63 bytes, and so may a
	// section.
	name := strings.Repeat("s", 63)
	c := mustParse(t, "[database]\n[stage-"+name+"]\nPROGRAM = x\n")
	if got := c.StageNames(); len(got) != 1 || got[0] != name {
		t.Errorf("StageNames() = %q", got)
	}
}

// writeConf writes a config file into dir and returns its path.
func writeConf(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := writeConf(t, dir, "pepsi.conf", specExample)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != p || c.Dispatch.ConfigFile != p || c.DSN == "" || len(c.Stages) != 1 {
		t.Errorf("Load = %+v", c)
	}

	// A relative path stays as given in Path and errors, but workers get
	// the absolute path.
	t.Chdir(dir)
	c, err = Load("pepsi.conf")
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != "pepsi.conf" || c.Dispatch.ConfigFile != p {
		t.Errorf("relative Load: Path %q ConfigFile %q, want %q", c.Path, c.Dispatch.ConfigFile, p)
	}
	// An explicit CONFIG_FILE is kept as written.
	writeConf(t, dir, "other.conf", "[pepsi-dispatch]\nCONFIG_FILE = workers.conf\n")
	if c, err = Load("other.conf"); err != nil || c.Dispatch.ConfigFile != "workers.conf" {
		t.Errorf("CONFIG_FILE: %+v, %v", c, err)
	}

	_, err = Load(filepath.Join(dir, "missing.conf"))
	var e *Error
	if !errors.As(err, &e) || e.Line != 0 || !errors.Is(err, fs.ErrNotExist) ||
		err.Error() != filepath.Join(dir, "missing.conf")+": cannot read: no such file or directory" {
		t.Errorf("missing file: %v", err)
	}
	if _, err = Load(dir); err == nil || !strings.HasPrefix(err.Error(), dir+": cannot read: ") {
		t.Errorf("directory: %v", err)
	}

	writeConf(t, dir, "bad.conf", "[database]\nDSN = x\nNOPE = 1\n")
	if _, err = Load("bad.conf"); err == nil || err.Error() != `bad.conf:3: unknown key "NOPE" in [database]` {
		t.Errorf("bad file: %v", err)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	flagConf := writeConf(t, dir, "flag.conf", "[database]\nDSN = from-flag\n")
	envConf := writeConf(t, dir, "env.conf", "[database]\nDSN = from-env-file\n[stage-e]\nPROGRAM = e\n")
	noDSN := writeConf(t, dir, "nodsn.conf", "[stage-x]\nPROGRAM = x\n")
	badConf := writeConf(t, dir, "bad.conf", "[database]\nDSN = x\n[nope]\n")
	missing := filepath.Join(dir, "missing.conf")

	tests := []struct {
		name     string
		flag     string
		env      map[string]string
		wantPath string
		wantDSN  string
		wantErr  string // exact, with DIR standing for dir
	}{
		{name: "flag wins over PEPSI_CONFIG", flag: flagConf,
			env:      map[string]string{"PEPSI_CONFIG": envConf},
			wantPath: flagConf, wantDSN: "from-flag"},
		{name: "PEPSI_CONFIG when no flag",
			env:      map[string]string{"PEPSI_CONFIG": envConf},
			wantPath: envConf, wantDSN: "from-env-file"},
		{name: "PEPSI_DSN overrides the file", flag: flagConf,
			env:      map[string]string{"PEPSI_DSN": "from-env"},
			wantPath: flagConf, wantDSN: "from-env"},
		{name: "PEPSI_DSN fills a missing DSN", flag: noDSN,
			env:      map[string]string{"PEPSI_DSN": "from-env"},
			wantPath: noDSN, wantDSN: "from-env"},
		{name: "missing explicit file", flag: missing,
			env:     map[string]string{"PEPSI_DSN": "from-env"},
			wantErr: "DIR/missing.conf: cannot read: no such file or directory"},
		{name: "missing PEPSI_CONFIG file",
			env:     map[string]string{"PEPSI_CONFIG": missing, "PEPSI_DSN": "from-env"},
			wantErr: "DIR/missing.conf: cannot read: no such file or directory"},
		{name: "empty DSN", flag: noDSN,
			wantErr: "DIR/nodsn.conf: no database: set [database] DSN in DIR/nodsn.conf or PEPSI_DSN"},
		{name: "bad file", flag: badConf, env: map[string]string{"PEPSI_DSN": "x"},
			wantErr: "DIR/bad.conf:3: unknown section [nope] (want [database], [pepsi-dispatch], [pepsi-httpd], [stage-NAME] or [schedule-NAME])"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Resolve(tt.flag, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				want := strings.ReplaceAll(tt.wantErr, "DIR", dir)
				if err == nil || err.Error() != want {
					t.Fatalf("error\n got %v\nwant %s", err, want)
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Errorf("error %T is not *Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Path != tt.wantPath || c.DSN != tt.wantDSN {
				t.Errorf("got Path %q DSN %q, want %q %q", c.Path, c.DSN, tt.wantPath, tt.wantDSN)
			}
		})
	}
}

// TestResolveDefaultPath covers the fall-back to DefaultPath, which must not
// exist on the test machine for the interesting cases.
func TestResolveDefaultPath(t *testing.T) {
	if _, err := os.Stat(DefaultPath); !errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s exists here (%v)", DefaultPath, err)
	}
	env := map[string]string{"PEPSI_DSN": "postgres:///x"}
	c, err := Resolve("", func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("missing default with PEPSI_DSN: %v", err)
	}
	want := Default()
	want.DSN = "postgres:///x"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v, want %+v", c, want)
	}

	// Without PEPSI_DSN a missing default file is an error that says what to do.
	_, err = Resolve("", func(string) string { return "" })
	wantErr := DefaultPath + ": cannot read: no such file or directory (name a file with -c or PEPSI_CONFIG, or set PEPSI_DSN)"
	if err == nil || err.Error() != wantErr {
		t.Errorf("error\n got %v\nwant %s", err, wantErr)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error does not wrap fs.ErrNotExist: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte("[stage-a]\nPROGRAM = \"\"\"x\ny\"\"\"\n[database]\nDSN = `a\nb`\n"))
	f.Add([]byte("\xEF\xBB\xBF[pepsi-dispatch]\r\nMAX_RUNTIME = 1h ; x\r\nRETENTION = 0\r\n"))
	f.Add([]byte("[stage-x]\nPROGRAM = a 'b #c' \"d\\\"e\" \\; ; comment\nPARALLELISM = 2\n"))
	f.Add([]byte("[database]\nDSN = \"\"\"\n[stage-y]\n"))
	f.Add([]byte("DSN = x\n[foo] junk\n= x\n[stage-]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.conf", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error: %v", err, err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.conf:") || e.Line < 1 {
				t.Fatalf("error does not name the file and the line: %v", err)
			}
			return
		}
		for _, s := range c.Stages {
			if protocol.CheckStage(s.Name) != nil || len(s.Program) == 0 || s.Parallelism < 1 ||
				s.QueueLimit < 1 || s.MaxMessages < 1 || s.Line < 1 {
				t.Fatalf("invalid stage accepted: %+v", s)
			}
		}
		d := c.Dispatch
		if d.MaxRuntime <= 0 || d.WorkerIdleTimeout <= 0 || d.PollInterval <= 0 || d.StatsInterval <= 0 ||
			d.ShutdownGrace <= 0 || d.SpawnCooldown <= 0 || d.Retention < 0 || !channelRE.MatchString(d.IngressChannel) {
			t.Fatalf("invalid dispatch settings accepted: %+v", d)
		}
	})
}

// TestWorkerDSN: [database] WORKER_DSN is what stage programs get as
// PEPSI_DSN (StageDSN), DSN when it is unset; PEPSI_DSN overrides DSN only.
func TestWorkerDSN(t *testing.T) {
	c := mustParse(t, "[database]\nDSN = host=/run/postgresql dbname=pepsi\nWORKER_DSN = host=/run/pgbouncer port=6432 dbname=pepsi ; the pooler\n")
	if c.DSN != "host=/run/postgresql dbname=pepsi" || c.WorkerDSN != "host=/run/pgbouncer port=6432 dbname=pepsi" || c.StageDSN() != c.WorkerDSN {
		t.Errorf("DSN %q WorkerDSN %q StageDSN %q", c.DSN, c.WorkerDSN, c.StageDSN())
	}
	for _, src := range []string{"[database]\nDSN = x\n", "[database]\nDSN = x\nWORKER_DSN =\n"} {
		if c := mustParse(t, src); c.WorkerDSN != "" || c.StageDSN() != "x" {
			t.Errorf("%q: WorkerDSN %q StageDSN %q, want \"\", \"x\"", src, c.WorkerDSN, c.StageDSN())
		}
	}
	for src, want := range map[string]string{
		"[database]\nWORKER_DSN = a\nDSN = x\nWORKER_DSN = b\n": `pepsi.conf:4: duplicate key "WORKER_DSN" in [database] (first at line 2)`,
		"[pepsi-dispatch]\nWORKER_DSN = a\n":                    `pepsi.conf:2: unknown key "WORKER_DSN" in [pepsi-dispatch]`,
	} {
		if _, err := Parse("pepsi.conf", []byte(src)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: error %v, want %s", src, err, want)
		}
	}

	conf := writeConf(t, t.TempDir(), "pepsi.conf", "[database]\nDSN = direct\nWORKER_DSN = pooled\n")
	c, err := Resolve(conf, func(k string) string { return map[string]string{"PEPSI_DSN": "from-env"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.DSN != "from-env" || c.StageDSN() != "pooled" {
		t.Errorf("with PEPSI_DSN: DSN %q StageDSN %q, want from-env, pooled", c.DSN, c.StageDSN())
	}
}

func TestStageSet(t *testing.T) {
	src := "[pepsi-dispatch]\nSTAGES = enrich , parse ; the middle\n[stage-parse]\nPROGRAM = p\n[stage-enrich]\nPROGRAM = e\n[stage-deliver]\nPROGRAM = d\n"
	c, err := Parse("p.conf", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if c.OwnsAll() || !slices.Equal(c.StageSet, []string{"enrich", "parse"}) || c.StageSetLine != 2 {
		t.Fatalf("StageSet = %q (line %d), OwnsAll %v", c.StageSet, c.StageSetLine, c.OwnsAll())
	}
	var owned []string
	for _, s := range c.Owned() {
		owned = append(owned, s.Name)
	}
	if !slices.Equal(owned, []string{"parse", "enrich"}) { // file order
		t.Errorf("Owned = %q", owned)
	}
	// The flag wins.
	if err := c.SetStages("deliver"); err != nil || !slices.Equal(c.StageSet, []string{"deliver"}) || c.StageSetLine != 0 {
		t.Errorf("SetStages(deliver) = %v; StageSet %q line %d", err, c.StageSet, c.StageSetLine)
	}
	for in, want := range map[string]string{
		"parse,nosuch": `--stages: unknown stage "nosuch" (no [stage-nosuch] section)`,
		"":             "--stages: no stage given (leave it out for every stage)",
		"parse,parse":  `--stages: stage "parse" given twice`,
	} {
		if err := c.SetStages(in); err == nil || err.Error() != want {
			t.Errorf("SetStages(%q) = %v, want %q", in, err, want)
		}
	}
	// Without STAGES: every stage, and no set.
	c, err = Parse("p.conf", []byte("[stage-a]\nPROGRAM = a\n"))
	if err != nil || !c.OwnsAll() || len(c.Owned()) != 1 {
		t.Errorf("no STAGES: %v, OwnsAll %v, Owned %v", err, c.OwnsAll(), c.Owned())
	}
}

// wantError fails t unless Parse of src fails with an *Error reading want.
func wantError(t *testing.T, src, want string) {
	t.Helper()
	_, err := Parse("pepsi.conf", []byte(src))
	var e *Error
	if !errors.As(err, &e) || err.Error() != want {
		t.Errorf("Parse(%.60q…): error %v\nwant %s", src, err, want)
	}
}

// TestLoadTooLarge: a file over 1 MiB is refused with one line naming it,
// after reading 1 MiB and a byte; a file of 1 MiB is read.
func TestLoadTooLarge(t *testing.T) {
	dir := t.TempDir()
	line := "; " + strings.Repeat("x", 1021) + "\n" // 1 KiB
	fits := filepath.Join(dir, "fits.conf")
	if err := os.WriteFile(fits, []byte(strings.Repeat(line, 1024)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fits); err != nil {
		t.Errorf("a file of 1 MiB: %v", err)
	}
	big := filepath.Join(dir, "big.conf")
	if err := os.WriteFile(big, []byte(strings.Repeat(line, 1024)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(big)
	var e *Error
	if !errors.As(err, &e) || err.Error() != big+": more than 1048576 bytes (1 MiB), too large for a configuration file" {
		t.Errorf("a file of 1 MiB and a byte: %v", err)
	}
}

// TestLoadEndless: a file that never ends (/dev/zero: it ran out of memory
// with a Go stack trace) is refused once 1 MiB is read.
func TestLoadEndless(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip(err)
	}
	_, err := Load("/dev/zero")
	var e *Error
	if !errors.As(err, &e) || err.Error() != "/dev/zero: more than 1048576 bytes (1 MiB), too large for a configuration file" {
		t.Errorf("Load(/dev/zero) = %v", err)
	}
}

// TestProgramEmptyCommand: a PROGRAM whose first word is empty or blank
// ("" or quoted blanks) names no program: refused at its line, where it
// failed only when a worker was started ("exec: no command"). An empty
// argument after the program is an argument like another.
func TestProgramEmptyCommand(t *testing.T) {
	for _, tt := range []struct{ program, word string }{
		{`""`, `""`},
		{`''`, `""`},
		{`"   "`, `"   "`},
		{"\"\t\"", `"\t"`},
		{`"" /bin/x`, `""`},
		{`'' --flag ; comment`, `""`},
	} {
		wantError(t, "[stage-a]\nPROGRAM = a\n[stage-b]\nPROGRAM = "+tt.program+"\n",
			`pepsi.conf:4: PROGRAM: the program to run (the first word, `+tt.word+`) is empty in [stage-b]`)
	}
	c := mustParse(t, "[stage-a]\nPROGRAM = /bin/x \"\" ' '\n")
	if p := c.Stages[0].Program; !slices.Equal(p, []string{"/bin/x", "", " "}) {
		t.Errorf("Program = %q", p)
	}
}

// TestValueTooLong: a value is at most 4096 bytes as written (a 2 MB
// PROGRAM passed every check, then was logged in one 2 MB line), whatever
// the key; the error names the key, its section and its line.
func TestValueTooLong(t *testing.T) {
	long := strings.Repeat("a", 4097)
	wantError(t, "[stage-a]\nPROGRAM = /bin/x "+long+"\n",
		`pepsi.conf:2: PROGRAM: value of 4104 bytes in [stage-a] (want at most 4096)`)
	wantError(t, "[stage-a]\nPROGRAM = \"\"\"/bin/x\n"+long+"\"\"\"\n",
		`pepsi.conf:2: PROGRAM: value of 4104 bytes in [stage-a] (want at most 4096)`)
	wantError(t, "[database]\nDSN = postgres:///x\n\nWORKER_DSN = postgres:///"+long+"\n",
		`pepsi.conf:4: WORKER_DSN: value of 4109 bytes in [database] (want at most 4096)`)
	wantError(t, "[pepsi-dispatch]\nCONFIG_FILE = /"+long+"\n",
		`pepsi.conf:2: CONFIG_FILE: value of 4098 bytes in [pepsi-dispatch] (want at most 4096)`)
	// 4096 bytes is fine.
	c := mustParse(t, "[stage-a]\nPROGRAM = /bin/x "+long[:4096-len("/bin/x ")]+"\n")
	if n := len(c.Stages[0].ProgramText); n != 4096 {
		t.Errorf("PROGRAM of %d bytes, want 4096", n)
	}
}

// TestMetricsListenPort: METRICS_LISTEN's port must be one the listener
// can take, 0 to 65535 or a service name; :99999 passed the check and
// pepsi dispatch then exited 1 without a line.
func TestMetricsListenPort(t *testing.T) {
	for _, tt := range []struct{ addr, want string }{
		{":99999", `port 99999 out of range in ":99999" (want 0 to 65535)`},
		{"127.0.0.1:65536", `port 65536 out of range in "127.0.0.1:65536" (want 0 to 65535)`},
		{"[::1]:-1", `port -1 out of range in "[::1]:-1" (want 0 to 65535)`},
		{"localhost:99999999999999999999", `port 99999999999999999999 out of range in "localhost:99999999999999999999" (want 0 to 65535)`},
		{":no-such-service", `unknown port "no-such-service" in ":no-such-service" (want a number from 0 to 65535 or a service name)`},
		{"9187", `bad address "9187" (want HOST:PORT or :PORT, or nothing for off)`},
	} {
		wantError(t, "[pepsi-dispatch]\nPOLL_INTERVAL = 5\nMETRICS_LISTEN = "+tt.addr+"\n", "pepsi.conf:3: METRICS_LISTEN: "+tt.want)
	}
	for _, addr := range []string{":0", ":1", "127.0.0.1:65535", "[::1]:9187", "localhost:9187"} {
		if c := mustParse(t, "[pepsi-dispatch]\nMETRICS_LISTEN = "+addr+"\n"); c.Dispatch.MetricsListen != addr {
			t.Errorf("METRICS_LISTEN = %q, want %q", c.Dispatch.MetricsListen, addr)
		}
	}
}
