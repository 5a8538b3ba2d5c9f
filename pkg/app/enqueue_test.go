package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

const stagesConf = "[stage-parse]\nPROGRAM = /bin/cat\n\n[stage-store]\nPROGRAM = /bin/cat\n"

// ids parses enqueue's output: one id per line.
func ids(t *testing.T, out string) []int64 {
	t.Helper()
	var ids []int64
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		id, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			t.Fatalf("enqueue printed %q", out)
		}
		ids = append(ids, id)
	}
	return ids
}

// count returns the number of messages, and of queue rows.
func count(t *testing.T, db *pgtest.DB) (messages, states int) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM pepsi.message), (SELECT count(*) FROM pepsi.state)").Scan(&messages, &states)
	if err != nil {
		t.Fatal(err)
	}
	return messages, states
}

func writeFiles(t *testing.T, contents ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, c := range contents {
		p := filepath.Join(dir, "in"+strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func TestEnqueueFiles(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	payloads := []string{"first\n", "\x00\xff binary\r\n\x01", "line one\nline two\n\n"}
	files := writeFiles(t, payloads...)

	r := pepsi(t, "", append([]string{"enqueue", "--stage", "parse", "--header", "source=test", "-H", "list=a,b", "-H", "eq=x=y"}, files...)...)
	r.wantCode(t, 0)
	got := ids(t, r.stdout)
	if len(got) != 3 || !(got[0] < got[1] && got[1] < got[2]) {
		t.Fatalf("ids %v, want 3 in increasing order", got)
	}
	wantHeaders := map[string]string{"source": "test", "list": "a,b", "eq": "x=y"}
	for i, id := range got {
		var payload, headers []byte
		var stage, status string
		err := db.Pool.QueryRow(context.Background(), `SELECT m.payload, m.headers, s.stage, s.status
			FROM pepsi.message m JOIN pepsi.state s USING (id) WHERE id = $1`, id).Scan(&payload, &headers, &stage, &status)
		if err != nil {
			t.Fatal(err)
		}
		if string(payload) != payloads[i] {
			t.Errorf("message %d: payload %q, want %q", id, payload, payloads[i])
		}
		var h map[string]string
		if err := json.Unmarshal(headers, &h); err != nil || !reflect.DeepEqual(h, wantHeaders) {
			t.Errorf("message %d: headers %s, want %v", id, headers, wantHeaders)
		}
		if stage != "parse" || status != "pending" {
			t.Errorf("message %d: %s at %s, want pending at parse", id, status, stage)
		}
	}
	var isObject bool
	db.Pool.QueryRow(context.Background(), "SELECT bool_and(jsonb_typeof(headers) = 'object' AND headers->>'list' = 'a,b') FROM pepsi.message").Scan(&isObject)
	if !isObject {
		t.Error("headers are not stored as a jsonb object")
	}
}

func TestEnqueueStdin(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "") // no stages configured: any valid stage name goes
	for _, args := range [][]string{{"enqueue", "-s", "anything.at-all_1"}, {"enqueue", "-s", "x", "-"}} {
		r := pepsi(t, "the payload", args...)
		r.wantCode(t, 0)
		id := ids(t, r.stdout)[0]
		var p []byte
		db.Pool.QueryRow(context.Background(), "SELECT payload FROM pepsi.message WHERE id = $1", id).Scan(&p)
		if string(p) != "the payload" {
			t.Errorf("%q: payload %q", args, p)
		}
	}
	// A stage name that could never be configured is refused even then.
	r := pepsi(t, "x", "enqueue", "-s", "no/slash")
	r.wantCode(t, 2)
	r.wantOneError(t, `--stage "no/slash"`)
}

// TestEnqueueStageNameLength: one rule for stage names in pepsi.conf and
// on the command line. 63 bytes is a stage; 64 and 70 are not, since no
// status line's next: could name them.
func TestEnqueueStageNameLength(t *testing.T) {
	db, dsn := pgtest.New(t)
	long := strings.Repeat("s", 63)
	env(t, dsn, "[stage-"+long+"]\nPROGRAM = /bin/cat\n")
	r := pepsi(t, "x", "enqueue", "-s", long)
	r.wantCode(t, 0)
	var stage string
	db.Pool.QueryRow(context.Background(), "SELECT stage FROM pepsi.state WHERE id = $1", ids(t, r.stdout)[0]).Scan(&stage)
	if stage != long {
		t.Errorf("enqueued at %q", stage)
	}

	for _, n := range []int{64, 70} {
		long := strings.Repeat("s", n)
		conf := env(t, dsn, "[database]\n\n[stage-"+long+"]\nPROGRAM = /bin/cat\n")
		r := pepsi(t, "x", "enqueue", "-s", long)
		r.wantCode(t, 2)
		r.wantOneError(t, fmt.Sprintf("pepsi enqueue: %s:3: bad stage name %q in [stage-%s] (want at most 63 bytes, not %d)", conf, long, long, n))

		env(t, dsn, "") // no stages configured: the name itself is refused
		r = pepsi(t, "x", "enqueue", "-s", long)
		r.wantCode(t, 2)
		r.wantOneError(t, fmt.Sprintf("pepsi enqueue: --stage %q: bad stage name (want at most 63 bytes, not %d)", long, n))
	}
	if messages, _ := count(t, db); messages != 1 {
		t.Errorf("%d messages, want 1", messages)
	}
}

func TestEnqueueLines(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	var in strings.Builder
	for i := 1; i <= 100000; i++ {
		in.WriteString(strconv.Itoa(i))
		in.WriteByte('\n')
	}
	r := pepsi(t, in.String(), "enqueue", "--stage", "parse", "--lines")
	r.wantCode(t, 0)
	got := ids(t, r.stdout)
	if len(got) != 100000 {
		t.Fatalf("%d ids printed", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("ids out of order at %d: %d, %d", i, got[i-1], got[i])
		}
	}
	var n, pending int
	db.Pool.QueryRow(context.Background(), "SELECT count(*), count(*) FILTER (WHERE status = 'pending' AND stage = 'parse') FROM pepsi.state").Scan(&n, &pending)
	if n != 100000 || pending != 100000 {
		t.Errorf("pepsi.state: %d rows, %d pending at parse; want 100000", n, pending)
	}
	// Payload i is line i, in id order.
	var bad int
	db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT payload, row_number() OVER (ORDER BY id) AS n FROM pepsi.message) m
		WHERE convert_from(payload, 'UTF8') <> n::text`).Scan(&bad)
	if bad != 0 {
		t.Errorf("%d payloads are not their line", bad)
	}
}

func TestEnqueueLinesEdges(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	files := writeFiles(t, "a\n\nb\r\n", "", "c") // empty lines skipped, \r kept, last line without newline
	r := pepsi(t, "d\n", append([]string{"enqueue", "-s", "store", "-l", "-q"}, append(files, "-")...)...)
	r.wantCode(t, 0)
	if r.stdout != "enqueued 4 messages\n" {
		t.Errorf("--quiet printed %q", r.stdout)
	}
	rows, _ := db.Pool.Query(context.Background(), "SELECT payload FROM pepsi.message ORDER BY id")
	got, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("a"), []byte("b\r"), []byte("c"), []byte("d")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("payloads %q, want %q", got, want)
	}
}

func TestEnqueueQuiet(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	r := pepsi(t, "1\n2\n3\n", "enqueue", "--quiet", "--lines", "--stage", "parse")
	r.wantCode(t, 0)
	if r.stdout != "enqueued 3 messages\n" || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	// One message is "1 message".
	r = pepsi(t, "1\n", "enqueue", "--quiet", "--lines", "--stage", "parse")
	r.wantCode(t, 0)
	if r.stdout != "enqueued 1 message\n" || r.stderr != "" {
		t.Errorf("one message: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

// TestEnqueueNothing: bad input inserts nothing and says which file.
func TestEnqueueNothing(t *testing.T) {
	db, dsn := pgtest.New(t)
	conf := env(t, dsn, stagesConf)
	dir := t.TempDir()
	files := writeFiles(t, "one", "", "three", "\n\n")
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"", []string{"-s", "parse"}, 1, "standard input: empty input"},
		{"", []string{"-s", "parse", "--lines"}, 1, "no lines in standard input"},
		{"", []string{"-s", "parse", "--lines", files[3]}, 1, "no lines in " + files[3]},
		{"", []string{"-s", "parse", files[0], files[1]}, 1, files[1] + ": empty input"},
		{"", []string{"-s", "parse", files[0], missing, files[2]}, 1, missing + ": no such file or directory"},
		{"", []string{"-s", "parse", files[0], dir, files[2]}, 1, dir + ": is a directory"},
		{"", []string{"-s", "parse", "--lines", files[0], missing}, 1, missing},
		{"x", []string{"-s", "nope"}, 2, `pepsi enqueue: --stage "nope": no [stage-nope] in ` + conf},
		{"x", []string{"-s", "parse", "-H", "novalue"}, 2, `--header "novalue": want KEY=VALUE`},
		{"x", []string{"-s", "parse", "-H", "=v"}, 2, `--header "=v"`},
		{"x", []string{"-s", "parse", "-H", "k=1", "--header", "k=2"}, 2, `header "k" given twice`},
		{"x", []string{"-s", "parse", files[0], "--quiet"}, 2, `"--quiet" after a FILE`},
		{"x", []string{"-s", "parse", "-", "-"}, 2, `standard input ("-") given more than once`},
	} {
		r := pepsi(t, tc.stdin, append([]string{"enqueue"}, tc.args...)...)
		r.wantCode(t, tc.code)
		r.wantOneError(t, tc.want)
		if r.stdout != "" {
			t.Errorf("%q printed %q", tc.args, r.stdout)
		}
	}
	if m, s := count(t, db); m != 0 || s != 0 {
		t.Errorf("failed runs left %d messages, %d queue rows", m, s)
	}
}

func TestEnqueueUnmigrated(t *testing.T) {
	dsn := pgtest.Empty(t)
	env(t, dsn, "")
	r := pepsi(t, "x", "enqueue", "-s", "parse")
	r.wantCode(t, 1)
	r.wantOneError(t, "run 'pepsi migrate'")
}

func TestEnqueueProgress(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	defer func(f func(io.Writer) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(io.Writer) bool { return true }

	in := bytes.Repeat([]byte("m\n"), 25000)
	r := pepsi(t, string(in), "enqueue", "-s", "parse", "-l", "-q")
	r.wantCode(t, 0)
	for _, want := range []string{"\rpepsi enqueue: 10000/25000 messages", "\rpepsi enqueue: 25000/25000 messages\n"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress %q lacks %q", r.stderr, want)
		}
	}
	// Small inputs show none.
	r = pepsi(t, "a\nb\n", "enqueue", "-s", "parse", "-l", "-q")
	if r.stderr != "" {
		t.Errorf("progress for 2 messages: %q", r.stderr)
	}
}
