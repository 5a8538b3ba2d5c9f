package app

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestQueueShowHistory: pepsi queue show lists a message's failed passes,
// oldest first, one line each (a reason that would not read as one line
// quoted), and its JSON has them as "history"; a message that never failed
// says none, and [] in JSON.
func TestQueueShowHistory(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	ids := seedQueue(t, db, "parse", queue.Done, 2)
	id := ids[0]
	sqlExec(t, db, `INSERT INTO pepsi.history (id, n, at, stage, attempt, kind, reason, pid, host) VALUES
		($1, 1, now() - interval '2 minutes', 'parse', 1, 'answer', 'stage parse answered 3: bad', 4242, 'host7'),
		($1, 2, now() - interval '1 minute', 'parse', 2, 'crash', e'worker crashed:\nsignal: killed', 4250, NULL)`, id)

	r := pepsi(t, "", "queue", "show", strconv.FormatInt(id, 10))
	r.wantCode(t, 0)
	for _, want := range []string{
		"failed passes   2\n",
		" parse attempt 1 answer pid 4242 on host7: stage parse answered 3: bad\n",
		" parse attempt 2 crash pid 4250: \"worker crashed:\\nsignal: killed\"\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Index(r.stdout, "pass 1 ") > strings.Index(r.stdout, "pass 2 ") {
		t.Errorf("passes not oldest first:\n%s", r.stdout)
	}

	r = pepsi(t, "", "queue", "show", "--json", strconv.FormatInt(id, 10), strconv.FormatInt(ids[1], 10))
	r.wantCode(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var m, none admin.Message
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &m) != nil || json.Unmarshal([]byte(lines[1]), &none) != nil {
		t.Fatalf("show --json:\n%s", r.stdout)
	}
	if len(m.History) != 2 || m.History[1].Kind != "crash" || m.History[1].Reason != "worker crashed:\nsignal: killed" ||
		*m.History[0].PID != 4242 || *m.History[0].Host != "host7" || m.History[1].Host != nil || m.History[0].Attempt != 1 {
		t.Errorf("show --json history: %+v", m.History)
	}
	if !strings.Contains(lines[1], `"history":[]`) {
		t.Errorf("a message that never failed: %s", lines[1])
	}

	r = pepsi(t, "", "queue", "show", strconv.FormatInt(ids[1], 10))
	if !strings.Contains(r.stdout, "failed passes   none\n") {
		t.Errorf("a message that never failed:\n%s", r.stdout)
	}
}

// TestQueueRetryKeepsFailReason: pepsi queue retry of a message its stage
// failed with pepsi.fail() clears its error, and pepsi queue show still
// says why it failed: a pass of kind fail with the reason.
func TestQueueRetryKeepsFailReason(t *testing.T) {
	db, dsn := pgtest.New(t)
	env(t, dsn, "")
	id := seedQueue(t, db, "parse", queue.Pending, 1)[0]
	sqlExec(t, db, "UPDATE pepsi.state SET status = 'running', attempts = 1, handed = stage WHERE id = $1", id)
	sqlExec(t, db, "SELECT pepsi.fail($1, 'no such customer: 42')", id)
	pepsi(t, "", "queue", "retry", strconv.FormatInt(id, 10)).wantCode(t, 0)
	if _, st := stateOf(t, db, id); st != queue.Pending {
		t.Fatalf("retried message is %s", st)
	}
	r := pepsi(t, "", "queue", "show", strconv.FormatInt(id, 10))
	r.wantCode(t, 0)
	for _, want := range []string{"error           -\n", "failed passes   1\n", " parse attempt 1 fail: no such customer: 42\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
}
