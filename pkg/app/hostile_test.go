package app

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// Hostile values already in the database (stored before the SQL API
// refused them, or written by anyone who may write a row), and hostile
// flags, as pepsi queue and pepsi enqueue take them.

// TestQueueFarTimeout: a timeout after the year 9999 lists like any
// other: ls --json and show --json print every row, with that time in
// RFC 3339's form and the year whole; the tables write its date, not a
// duration of 106751 days.
func TestQueueFarTimeout(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	ids := seedQueue(t, db, "a", queue.Paused, 3)
	sqlExec(t, db, "UPDATE pepsi.state SET stage = 'b', timeout = '10000-01-01 00:00:00+00' WHERE id = $1", ids[1])

	r := pepsi(t, "", "queue", "ls", "--json")
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], `"timeout":"10000-01-01T`) {
		t.Fatalf("ls --json: want 3 rows, the second's timeout in the year 10000:\n%s\nstderr: %s", r.stdout, r.stderr)
	}
	var row admin.Row
	if err := json.Unmarshal([]byte(lines[1]), &row); err != nil || row.Timeout == nil || row.Timeout.UTC().Year() != 10000 {
		t.Errorf("ls --json's row does not read back: %v, %+v", err, row.Timeout)
	}
	r = pepsi(t, "", "queue", "show", "--json", strconv.FormatInt(ids[1], 10))
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"timeout":"10000-01-01T`) {
		t.Errorf("show --json: %s", r.stdout)
	}
	for _, args := range [][]string{{"queue", "ls"}, {"queue"}, {"queue", "show", strconv.FormatInt(ids[1], 10)}} {
		r = pepsi(t, "", args...)
		r.wantCode(t, 0)
		if strings.Contains(r.stdout, "106751d") || !strings.Contains(r.stdout, "10000-01-0") && !strings.Contains(r.stdout, "9999-12-31") {
			t.Errorf("%q: the year 10000 as a duration, or not at all:\n%s", args, r.stdout)
		}
	}
}

// TestQueueLongErrors: the lists read the start of an error, not the
// whole: 20 failed messages with a distinct error of a megabyte each
// (stored before pepsi.fail cut long reasons) make ls print at most
// admin.MaxErrorList characters of each, ending in "…", and show at
// most admin.MaxErrorShow.
func TestQueueLongErrors(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	ids := seedQueue(t, db, "a", queue.Failed, 20)
	sqlExec(t, db, `UPDATE pepsi.state SET error = id || ': ' || repeat(md5(id::text), 32768) WHERE id = ANY($1)`, ids)

	r := pepsi(t, "", "queue", "ls", "--status", "failed", "--json")
	r.wantCode(t, 0)
	if max := len(ids) * (admin.MaxErrorList*4 + 400); len(r.stdout) > max {
		t.Errorf("ls --json of 20 messages: %d bytes, want at most %d", len(r.stdout), max)
	}
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var row admin.Row
		if err := json.Unmarshal([]byte(line), &row); err != nil || row.Error == nil {
			t.Fatalf("line %.100q: %v", line, err)
		}
		if n := utf8.RuneCountInString(*row.Error); n != admin.MaxErrorList || !strings.HasSuffix(*row.Error, "…") {
			t.Errorf("message %d: an error of %d characters, want %d ending in …", row.ID, n, admin.MaxErrorList)
		}
	}
	r = pepsi(t, "", "queue", "ls", "--status", "failed")
	r.wantCode(t, 0)
	if max := (len(ids) + 1) * 200; len(r.stdout) > max {
		t.Errorf("ls of 20 messages: %d bytes, want at most %d", len(r.stdout), max)
	}
	r = pepsi(t, "", "queue", "show", "--json", strconv.FormatInt(ids[0], 10))
	r.wantCode(t, 0)
	var m admin.Message
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m.Error == nil ||
		utf8.RuneCountInString(*m.Error) != admin.MaxErrorShow || !strings.HasPrefix(*m.Error, strconv.FormatInt(ids[0], 10)+": ") {
		t.Errorf("show --json: %v, error of %d bytes", err, len(r.stdout))
	}
}

// TestQueueTerminalEscapes: what the database holds is printed with its
// control characters escaped in every table and summary line (ls's
// ERROR and KEY, the summary's pause line, pause's own report, the
// stages of stats), and quoted by show.
func TestQueueTerminalEscapes(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-a]\nPROGRAM = /bin/true\n")
	ids := seedQueue(t, db, "a", queue.Failed, 2)
	sqlExec(t, db, "UPDATE pepsi.state SET error = $2, dedup_key = $3 WHERE id = $1", ids[0], "1 # \x1b]0;pwned\a\x1b[2J", "k\x1b[31m\u202e")
	sqlExec(t, db, "UPDATE pepsi.state SET dispatch_error = $2 WHERE id = $1", ids[1], "stage a answered 1: \u009b2J")
	pepsi(t, "", "queue", "pause", "--stage", "a", "--reason", "\x1b]0;pwned\a").wantCode(t, 0)
	sqlExec(t, db, "INSERT INTO pepsi.stage_stats (stage) VALUES ($1)", "old\x1b[2J") // a row of long ago

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"queue", "ls"}, []string{`1 # \x1b]0;pwned\a\x1b[2J`, `k\x1b[31m\u202e`, `stage a answered 1: \u009b2J`}},
		{[]string{"queue"}, []string{`: \x1b]0;pwned\a`}},
		{[]string{"queue", "pause", "--stage", "a"}, []string{`paused already: `, `: \x1b]0;pwned\a`}},
		{[]string{"queue", "show", strconv.FormatInt(ids[0], 10)}, []string{`"1 # \x1b]0;pwned\a\x1b[2J"`, `"k\x1b[31m\u202e"`}},
		{[]string{"stats"}, []string{`old\x1b[2J`}},
	} {
		r := pepsi(t, "", tc.args...)
		r.wantCode(t, 0)
		if i := strings.IndexFunc(r.stdout, func(c rune) bool { return c != '\n' && unsafeRune(c) }); i >= 0 {
			t.Errorf("%q printed the control character %U:\n%q", tc.args, []rune(r.stdout[i:])[0], r.stdout)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%q: no %s in\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

// TestPrintable: the one escaper of the tables' cells.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, é, 日本":  "plain text, é, 日本",
		"\x1b]0;x\a\x1b[2J":  `\x1b]0;x\a\x1b[2J`,
		"tab\there\r\n":      `tab\there\r\n`,
		"c1 \u009b del \x7f": `c1 \u009b del \x7f`,
		"bidi \u202e \u2066": `bidi \u202e \u2066`,
		"line \u2028 sep":    `line \u2028 sep`,
		"bad \xff\xfe byte":  `bad \xff\xfe byte`,
		"real \ufffd stays":  "real \ufffd stays",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFlagsNotUTF8: every flag that takes free text refuses bytes that
// are not UTF-8 with one line naming it, exit 2, and does nothing; a
// payload is bytes, any bytes, stored as given.
func TestFlagsNotUTF8(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "[stage-a]\nPROGRAM = /bin/true\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "ls", "--header", "k=\xff"}, `pepsi queue ls: --header "k=\xff": not UTF-8 text`},
		{[]string{"queue", "ls", "--payload", "\xff"}, `pepsi queue ls: --payload "\xff": not UTF-8 text`},
		{[]string{"queue", "pause", "--stage", "a", "--reason", "\xff"}, `pepsi queue pause: --reason "\xff": not UTF-8 text`},
		{[]string{"enqueue", "-s", "a", "-H", "k=\xff\xfe"}, `pepsi enqueue: --header "k=\xff\xfe": not UTF-8 text`},
		{[]string{"enqueue", "-s", "a", "--header", "\xff=v"}, `pepsi enqueue: --header "\xff=v": not UTF-8 text`},
		{[]string{"enqueue", "-s", "a", "--key", "k\xff"}, `pepsi enqueue: --key "k\xff": not UTF-8 text`},
	} {
		r := pepsi(t, "payload", tc.args...)
		r.wantCode(t, 2)
		r.wantOneError(t, tc.want)
		if r.stdout != "" {
			t.Errorf("%q wrote to stdout: %q", tc.args, r.stdout)
		}
	}
	if n := queryInt(t, dsn, "SELECT (SELECT count(*) FROM pepsi.message) + (SELECT count(*) FROM pepsi.ingress) + (SELECT count(*) FROM pepsi.paused_stages)"); n != 0 {
		t.Errorf("the refused commands left %d messages or pauses", n)
	}

	r := pepsi(t, "\xff\xfe\x00 bytes", "enqueue", "-s", "a")
	r.wantCode(t, 0)
	var payload []byte
	id, _ := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if err := db.Pool.QueryRow(t.Context(), "SELECT payload FROM pepsi.message WHERE id = $1", id).Scan(&payload); err != nil || string(payload) != "\xff\xfe\x00 bytes" {
		t.Errorf("a payload that is not UTF-8: %q, %v", payload, err)
	}
}
