package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestEnqueuePriorityKey: enqueue --priority and --key write the rows,
// --key prints the holder's id when the key is taken (and says so with
// --verbose), queue ls and show print both, and retry --priority changes
// the priority.
func TestEnqueuePriorityKey(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)

	r := pepsi(t, "a\nb\n", "enqueue", "-s", "parse", "--lines", "--priority", "-3")
	r.wantCode(t, 0)
	bulk := ids(t, r.stdout)
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1) AND priority = -3", bulk); n != 2 {
		t.Fatalf("%d of %v at priority -3, want 2", n, bulk)
	}

	r = pepsi(t, "order 7", "enqueue", "-s", "parse", "--key", "order-7", "--priority", "2", "--verbose")
	r.wantCode(t, 0)
	first := ids(t, r.stdout)[0]
	if !strings.Contains(r.stderr, "is new") {
		t.Errorf("--verbose on a new message: stderr %q", r.stderr)
	}
	r = pepsi(t, "order 7 again", "enqueue", "-s", "parse", "--key", "order-7", "-v")
	r.wantCode(t, 0)
	if got := ids(t, r.stdout); got[0] != first {
		t.Errorf("second enqueue with key order-7 printed %d, want the holder %d", got[0], first)
	}
	if want := `key "order-7" is held by unfinished message ` + strconv.FormatInt(first, 10); !strings.Contains(r.stderr, want) {
		t.Errorf("--verbose on a held key: stderr %q, want %q", r.stderr, want)
	}
	r = pepsi(t, "x", "enqueue", "-s", "parse", "--key", "order-7", "--quiet")
	r.wantCode(t, 0)
	if r.stdout != "enqueued 0 messages\n" || r.stderr != "" {
		t.Errorf("--quiet on a held key: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.message"); n != 3 {
		t.Errorf("%d messages, want 3", n)
	}

	r = pepsi(t, "", "queue", "ls", "--json")
	r.wantCode(t, 0)
	type lsRow struct {
		ID       int64   `json:"id"`
		Priority int     `json:"priority"`
		Key      *string `json:"key"`
	}
	var rows []lsRow
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var x lsRow
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatalf("ls --json line %q: %v", l, err)
		}
		rows = append(rows, x)
	}
	if len(rows) != 3 || rows[0].Priority != -3 || rows[0].Key != nil || rows[2].Priority != 2 || rows[2].Key == nil || *rows[2].Key != "order-7" {
		t.Errorf("ls --json: %+v", rows)
	}
	r = pepsi(t, "", "queue", "ls")
	r.wantCode(t, 0)
	if lines := strings.Split(r.stdout, "\n"); len(lines) < 4 || !strings.Contains(lines[3], " 2 ") || !strings.Contains(lines[3], "order-7") {
		t.Errorf("ls table:\n%s", r.stdout)
	}
	r = pepsi(t, "", "queue", "show", strconv.FormatInt(first, 10))
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "priority        2\n") || !strings.Contains(r.stdout, "key             order-7\n") {
		t.Errorf("show:\n%s", r.stdout)
	}

	sqlExec(t, db, "UPDATE pepsi.state SET status = 'failed' WHERE id = $1", first)
	r = pepsi(t, "", "queue", "retry", "--priority", "-9", strconv.FormatInt(first, 10))
	r.wantCode(t, 0)
	if r.stdout != "retried 1 message with priority -9\n" {
		t.Errorf("retry --priority printed %q", r.stdout)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE id = $1 AND priority = -9 AND status = 'pending' AND dedup_key = 'order-7'", first); n != 1 {
		t.Error("retry --priority -9 did not set the priority (or lost the key)")
	}
}

// TestPriorityKeyUsage: bad --priority and --key uses exit 2 with one line
// naming the flag, and enqueue nothing.
func TestPriorityKeyUsage(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	files := writeFiles(t, "one", "two")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "-s", "parse", "--priority", "high"}, `--priority "high": want an integer`},
		{[]string{"enqueue", "-s", "parse", "--priority", "99999999999"}, `--priority "99999999999"`},
		{[]string{"enqueue", "-s", "parse", "--key", ""}, "--key is empty"},
		{[]string{"enqueue", "-s", "parse", "--key", "k", "--lines"}, "--key names one message"},
		{[]string{"enqueue", "-s", "parse", "--key", "k", files[0], files[1]}, "--key names one message; 2 FILEs"},
		{[]string{"queue", "retry", "--priority", "1.5", "1"}, `--priority "1.5"`},
	} {
		r := pepsi(t, "x", tc.args...)
		r.wantCode(t, 2)
		r.wantOneError(t, tc.want)
	}
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.message"); n != 0 {
		t.Errorf("bad flags enqueued %d messages", n)
	}
}

// TestQueueShowFlowKey: at a stage with KEY, pepsi queue show prints a
// message's key and the earlier message of that key it waits behind
// (running or not), and the JSON form carries both.
func TestQueueShowFlowKey(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	ctx := context.Background()
	if _, _, err := db.SetFlowKeys(ctx, []string{"parse"}, []queue.FlowKey{{Stage: "parse", Header: "customer", Limit: 1}}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for range 3 {
		id, err := queue.Enqueue(ctx, db.Pool, "parse", nil, map[string]string{"customer": "acme"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := db.Admit(ctx); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'running' WHERE id = $1", ids[0])
	r := pepsi(t, "", "queue", "show", strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[2], 10))
	r.wantCode(t, 0)
	blocks := strings.Split(r.stdout, "\n\n")
	if len(blocks) != 2 || !strings.Contains(blocks[0], "flow_key        acme\n") ||
		!strings.Contains(blocks[1], "flow_key        acme (waits behind "+strconv.FormatInt(ids[0], 10)+")\n") {
		t.Fatalf("show:\n%s", r.stdout)
	}
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'done' WHERE id = $1", ids[0])
	r = pepsi(t, "", "queue", "show", "--json", strconv.FormatInt(ids[2], 10))
	r.wantCode(t, 0)
	var m admin.Message
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m.FlowKey == nil || *m.FlowKey != "acme" || m.Behind == nil || *m.Behind != ids[1] {
		t.Fatalf("show --json = %s (%v)", r.stdout, err)
	}
	r = pepsi(t, "", "queue", "summary")
	if r.wantCode(t, 0); !strings.Contains(r.stdout, "\nstage parse: KEY = header:customer, KEY_LIMIT = 1\n") {
		t.Errorf("summary:\n%s", r.stdout)
	}
	// No KEY at its stage: no flow_key line.
	other, err := queue.Enqueue(ctx, db.Pool, "store", nil, map[string]string{"customer": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	r = pepsi(t, "", "queue", "show", strconv.FormatInt(other, 10))
	if r.wantCode(t, 0); strings.Contains(r.stdout, "flow_key") {
		t.Errorf("show at a stage without KEY:\n%s", r.stdout)
	}
}

// TestEnqueuePriorityRange: a --priority outside a 32-bit integer says the
// range, not that it is no integer; the ends of the range are taken.
func TestEnqueuePriorityRange(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	for _, p := range []string{"2147483648", "-2147483649", "99999999999999999999"} {
		r := pepsi(t, "x", "enqueue", "-s", "parse", "--priority", p)
		r.wantCode(t, 2)
		r.wantOneError(t, `pepsi enqueue: --priority "`+p+`": out of range (want an integer from -2147483648 to 2147483647; lower is claimed first)`)
	}
	r := pepsi(t, "x", "queue", "retry", "--priority", "high", "1")
	r.wantCode(t, 2)
	r.wantOneError(t, `--priority "high": want an integer from -2147483648 to 2147483647`)
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.message"); n != 0 {
		t.Errorf("bad priorities enqueued %d messages", n)
	}
	for _, p := range []string{"2147483647", "-2147483648"} {
		pepsi(t, "x", "enqueue", "-s", "parse", "--priority", p).wantCode(t, 0)
		if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE priority = $1::int", p); n != 1 {
			t.Errorf("%d messages at priority %s, want 1", n, p)
		}
	}
}

// TestEnqueueKeyTooLong: a --key over 1024 bytes is refused before the
// database sees it (it failed with the server's "index row requires …"),
// with one line that gives the limit; a key of 1024 bytes, one that the
// index cannot compress, is enqueued.
func TestEnqueueKeyTooLong(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, stagesConf)
	random := func(n int) string {
		b := make([]byte, n/2)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	r := pepsi(t, "x", "enqueue", "-s", "parse", "--key", random(10240))
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi enqueue: --key of 10240 bytes: want at most 1024 bytes")
	r = pepsi(t, "x", "enqueue", "-s", "parse", "--key", strings.Repeat("é", 513))
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi enqueue: --key of 1026 bytes: want at most 1024 bytes")
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.message"); n != 0 {
		t.Errorf("long keys enqueued %d messages", n)
	}
	key := random(1024)
	pepsi(t, "x", "enqueue", "-s", "parse", "--key", key).wantCode(t, 0)
	if n := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE dedup_key = $1", key); n != 1 {
		t.Errorf("%d messages with the 1024-byte key, want 1", n)
	}
}
