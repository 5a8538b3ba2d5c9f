package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestDispatchWorkerDSN: a WORKER_DSN that reaches another database than
// DSN is refused at start with one line (exit 2), before anything is
// claimed; one that cannot be connected to is refused too (exit 1), and
// one that does not parse is named (exit 2). One that reaches the same
// database passes.
func TestDispatchWorkerDSN(t *testing.T) {
	other := pgtest.Empty(t)
	dbname := func(dsn string) string {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Database
	}
	stage := "[stage-work]\nPROGRAM = " + testkit.Worker(t) + "\n"
	for _, tc := range []struct {
		name      string
		workerDSN func(dsn string) string
		code      int
		want      func(site *testkit.Site) string
	}{
		{"another database", func(string) string { return other }, 2, func(s *testkit.Site) string {
			return fmt.Sprintf("pepsi dispatch: %s: WORKER_DSN reaches database %q, not the dispatcher's %q", s.Path, dbname(other), dbname(s.DSN))
		}},
		{"unreachable", func(string) string { return "host=/nonexistent-pepsi-socket-dir dbname=pepsi" }, 1, func(s *testkit.Site) string {
			return fmt.Sprintf("pepsi dispatch: %s: WORKER_DSN: connect: ", s.Path)
		}},
		{"unparsable", func(dsn string) string { return dsn + " connect_timeout=xyz" }, 2, func(s *testkit.Site) string {
			return fmt.Sprintf("pepsi dispatch: [database] WORKER_DSN in %s: cannot parse", s.Path)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := testkit.NewSite(t, stage, func(dsn string) string { return "WORKER_DSN = " + tc.workerDSN(dsn) + "\n" })
			t.Setenv("PEPSI_CONFIG", site.Path)
			t.Setenv("PEPSI_DSN", site.DSN)
			ids := site.Enqueue("work", []byte("work=finish"))
			r := refused(t)
			r.wantCode(t, tc.code)
			r.wantOneError(t, tc.want(site))
			if n := site.Int64("SELECT count(*) FROM pepsi.state WHERE id = $1 AND status = 'pending'", ids[0]); n != 1 {
				t.Errorf("the message is no longer pending")
			}
		})
	}
	t.Run("same database", func(t *testing.T) {
		site := testkit.NewSite(t, stage, func(dsn string) string { return "WORKER_DSN = " + dsn + "\n" })
		site.WorkerTables()
		t.Setenv("PEPSI_CONFIG", site.Path)
		t.Setenv("PEPSI_DSN", site.DSN)
		d := startDispatch(t, "dispatcher")
		d.waitLog("dispatcher started", 1)
		site.Enqueue("work", []byte("work=finish"))
		site.WaitSettled(time.Minute, d.logs)
		if code := d.signal(syscall.SIGTERM); code != 0 {
			t.Errorf("SIGTERM: exit %d, want 0", code)
		}
		if n := site.Count("done"); n != 1 {
			t.Errorf("%d done, want 1", n)
		}
	})
}

// refused runs the binary's dispatch, which must exit within a minute.
func refused(t *testing.T) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "dispatch")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the dispatcher did not exit; stderr:\n%s", errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// TestDispatchDSNEnvironment: a PG* variable that cannot be parsed is
// named in one line (exit 2), as by the other commands, not blamed on the
// DSN at exit 1.
func TestDispatchDSNEnvironment(t *testing.T) {
	env(t, "host=/nonexistent-pepsi-socket-dir", "[stage-work]\nPROGRAM = /bin/true\n")
	t.Setenv("PGCONNECT_TIMEOUT", "abc")
	r := pepsi(t, "", "dispatch")
	r.wantCode(t, 2)
	r.wantOneError(t, `pepsi dispatch: PGCONNECT_TIMEOUT="abc" in the environment: invalid connect_timeout`)
}
