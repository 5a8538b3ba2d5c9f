package contrib_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestPgBouncerWorkerDSN: a WORKER_DSN through PgBouncer in transaction
// mode that names another database than the dispatcher's DSN is refused
// at start, exit 2 and one line naming both databases: the check passes
// through the pooler (TestPgBouncer runs a pipeline through one that
// names the right one).
func TestPgBouncerWorkerDSN(t *testing.T) {
	b := startPgBouncer(t)
	defer b.stop() // before the test databases are dropped, with its server connections
	_, dsn := pgtest.New(t)
	other := pgtest.Empty(t)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/pepsi").CombinedOutput(); err != nil {
		t.Fatalf("build pepsi: %v\n%s", err, out)
	}
	conf := filepath.Join(t.TempDir(), "pepsi.conf")
	body := "[database]\nDSN = " + dsn + "\nWORKER_DSN = " + b.dsn(other) + "\n\n[stage-a]\nPROGRAM = /bin/true\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pepsi"), "-c", conf, "dispatch")
	cmd.Env = append(os.Environ(), "PEPSI_DSN=", "PEPSI_CONFIG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	name := func(dsn string) string {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Database
	}
	want := fmt.Sprintf("pepsi dispatch: %s: WORKER_DSN reaches database %q, not the dispatcher's %q\n", conf, name(other), name(dsn))
	if code := cmd.ProcessState.ExitCode(); code != 2 || stdout.Len() != 0 || stderr.String() != want {
		t.Errorf("exit %d (%v), stdout %q, stderr %q; want exit 2 and %q", code, err, stdout.String(), stderr.String(), want)
	}
	if t.Failed() {
		t.Logf("pgbouncer log:\n%s", b.log)
	}
}
