package app

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestGraphDispatchKill9: the dispatcher is killed with SIGKILL in the
// middle of a fan-out and started again. No join runs twice, none is lost,
// no parent waits for ever: the new dispatcher resets what the dead one
// had running, and a join the dead one's last settle could not settle is
// settled by the next settle or the janitor's sweep.
func TestGraphDispatchKill9(t *testing.T) {
	worker := testkit.Worker(t)
	var conf strings.Builder
	conf.WriteString("[pepsi-dispatch]\nPOLL_INTERVAL = 2\nSTATS_INTERVAL = 1\nSHUTDOWN_GRACE = 5\nRECONNECT_MIN = 0.1\nRECONNECT_MAX = 1\nORPHAN_SWEEP = 2\n")
	for _, s := range []string{"split", "item", "sum"} {
		fmt.Fprintf(&conf, "\n[stage-%s]\nPROGRAM = %s\nPARALLELISM = 2\nQUEUE_LIMIT = 8\n", s, worker)
	}
	site := testkit.NewSite(t, conf.String())
	site.WorkerTables()
	t.Setenv("PEPSI_DSN", site.DSN)
	t.Setenv("PEPSI_CONFIG", site.Path)
	const parents, children = 40, 30
	ps := make([][]byte, parents)
	for i := range ps {
		ps[i] = fmt.Appendf(nil, "@sleep=3ms split=fanout:%d/item/sum item=result sum=joinread", children)
	}
	ids := site.Enqueue("split", ps...)
	a := startDispatch(t, "first dispatcher")
	testkit.Wait(t, "a few joins", time.Minute, func() bool { return site.Int64("SELECT count(*) FROM test_joins") >= 3 }, a.logs)
	a.signal(syscall.SIGSTOP)
	if n := site.Int64("SELECT count(*) FROM test_joins"); n == parents {
		t.Fatal("every join ran before the kill: the test proves nothing")
	}
	a.signal(syscall.SIGKILL)
	gone := fmt.Sprintf("pepsi dispatch%% pid %d on %%", a.cmd.Process.Pid)
	testkit.Wait(t, "the killed dispatcher's sessions ended", time.Minute, func() bool {
		return site.Int64("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1", gone) == 0
	})
	b := startDispatch(t, "second dispatcher")
	b.waitLog("dispatcher started", 1)
	site.WaitSettled(settleTimeout, b.logs)
	if code := b.signal(syscall.SIGTERM); code != 0 {
		t.Errorf("SIGTERM: exit %d, want 0", code)
	}
	site.Check(testkit.RowsOnly, testkit.Settled)
	if n := site.Count("done"); n != parents*(children+1) {
		t.Errorf("%d done, want %d", n, parents*(children+1))
	}
	for _, id := range ids {
		runs := site.Int64("SELECT count(*) FROM test_joins WHERE id = $1", id)
		read := site.Int64("SELECT coalesce(max(results), -1) FROM test_joins WHERE id = $1", id)
		if runs != 1 || read != children {
			t.Errorf("parent %d: join ran %d times, read %d results, want once, %d", id, runs, read, children)
		}
	}
}
