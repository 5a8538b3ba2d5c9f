package app

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// shellStage finishes every message it is given, through psql.
const shellStage = `#!/bin/sh
while read id; do
	if psql -X -q -v ON_ERROR_STOP=1 "$PEPSI_DSN" -c "select pepsi.finish($id)" >/dev/null; then
		echo 0
	else
		echo "1 # psql failed"
	fi
done
`

// TestDispatchBinary runs the real pepsi dispatch: it processes messages,
// refuses a second dispatcher, and exits 0 on SIGTERM.
func TestDispatchBinary(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatal("psql is needed for the shell stage program: apt-get install postgresql-client")
	}
	bin := binary(t)
	db, dsn := pgtest.New(t)
	dir := t.TempDir()
	stage := filepath.Join(dir, "finish.sh")
	if err := os.WriteFile(stage, []byte(shellStage), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := env(t, dsn, "[pepsi-dispatch]\nSHUTDOWN_GRACE = 5\n\n[stage-work]\nPROGRAM = "+stage+"\nPARALLELISM = 2\n")
	ctx := context.Background()
	if _, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: "work", Payloads: make([][]byte, 20)}); err != nil {
		t.Fatal(err)
	}

	disp := startChild(t, bin, "dispatch")
	logs := disp.logs

	testkit.Wait(t, "20 messages done", time.Minute, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE status = 'done'").Scan(&n)
		return n == 20
	}, logs)

	second := exe(t, bin, "", "dispatch")
	second.wantCode(t, 1)
	second.wantOneError(t, "pepsi dispatch: another dispatcher is running: stage work is owned by pepsi dispatch pid ")

	disp.stop(t)
	for _, want := range []string{"dispatcher started", "stopping: signal received", "dispatcher stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	var done int64
	if err := db.Pool.QueryRow(ctx, "SELECT done FROM pepsi.dispatch_stats").Scan(&done); err != nil || done != 20 {
		t.Errorf("dispatch_stats.done = %d (%v), want 20", done, err)
	}
	testkit.CheckInvariants(t, db)

	noStages := env(t, dsn, "[pepsi-dispatch]\nPOLL_INTERVAL = 5\n")
	r := exe(t, bin, "", "dispatch")
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi dispatch: "+noStages+": no [stage-NAME] sections: nothing to dispatch")
	_ = conf
}

// TestDispatchConnectionLimit: a PARALLELISM the server's max_connections
// cannot serve is a configuration error (exit 2) at start, before a worker
// starts or a message is claimed.
func TestDispatchConnectionLimit(t *testing.T) {
	db, dsn := pgtest.New(t)
	maxConns := queryInt(t, dsn, "SELECT current_setting('max_connections')::int")
	su := queryInt(t, dsn, "SELECT current_setting('superuser_reserved_connections')::int")
	reserved := queryInt(t, dsn, "SELECT coalesce(current_setting('reserved_connections', true)::int, 0)")
	conf := env(t, dsn, "[stage-work]\nPROGRAM = /bin/true\nPARALLELISM = 100000\n\n[stage-next]\nPROGRAM = /bin/true\n")
	ids, err := db.EnqueueBulk(context.Background(), queue.Bulk{Stage: "work", Payloads: make([][]byte, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := pepsi(t, "", "dispatch")
	r.wantCode(t, 2)
	r.wantOneError(t, fmt.Sprintf("pepsi dispatch: %s: PARALLELISM allows 100004 workers ([stage-work] 100000, [stage-next] 4), "+
		"a database connection each, and the dispatcher opens 6 of its own: 100010 connections, more than the server allows (%d: max_connections %d - superuser_reserved_connections %d",
		conf, maxConns-su-reserved, maxConns, su))
	if st := queryInt(t, dsn, "SELECT count(*) FROM pepsi.state WHERE id = $1 AND status = 'pending'", ids[0]); st != 1 {
		t.Errorf("the message is no longer pending")
	}
}
