package contrib_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
	"github.com/pepsi-dev/pepsi/pkg/worker/workertest"
)

// bouncerPool is the pooler's server connections per database: fewer than
// the workers of one stage.
const bouncerPool = 3

// TestPgBouncer runs the contrib Go and Python stages behind a real
// PgBouncer in transaction mode, started by the test, with 8 workers per
// stage sharing 3 server connections: 2 000 messages through 3 stages,
// every one done, none lost or left running, the statistics equal to the
// rows, and never more than 3 worker sessions on the server. Then a
// dispatcher pointed at the same pooler is refused: exit 1, one line.
//
// It lives here rather than in pkg/app because it is about the stage
// programs of contrib/ (and pkg/worker, which the Go one is built on), run
// as child processes by a real dispatcher as TestExamples runs them, and
// it treats a missing tool as TestExamples does; the refused dispatcher is
// the real pepsi binary.
func TestPgBouncer(t *testing.T) {
	py := pythonStage(t)
	b := startPgBouncer(t)
	bin := t.TempDir()
	for _, pkg := range []string{"./go/stage", "../cmd/pepsi"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	goStage, pepsi := filepath.Join(bin, "stage"), filepath.Join(bin, "pepsi")

	start := time.Now()
	p := workertest.StartWith(t, workertest.Options{WorkerDSN: b.dsn},
		workertest.Stage{Name: "a", Program: goStage + " --next b", Parallelism: 8, MaxMessages: 200},
		workertest.Stage{Name: "b", Program: py + " --next c", Parallelism: 8, MaxMessages: 200},
		workertest.Stage{Name: "c", Program: goStage, Parallelism: 8, MaxMessages: 200})
	if !strings.HasPrefix(p.Config.StageDSN(), "host="+b.dir+" ") {
		t.Fatalf("the workers get %q, not the pooler", p.Config.StageDSN())
	}
	const n, retryEvery = 2000, 100
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = fmt.Appendf(nil, "message %d", i)
		if i%retryEvery == 0 {
			payloads[i] = []byte("retry") // paused once at each stage
		}
	}

	// Sample the server's sessions of the workers while they run: through
	// the pooler there are never more than its pool (PgBouncer sets each
	// server connection's application_name to its client's).
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	var most, samples int64
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var k int64
			if err := p.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name LIKE 'pepsi-worker %'`).Scan(&k); err == nil {
				most, samples = max(most, k), samples+1
			}
		}
	}()
	ids := p.Enqueue("a", payloads...)
	p.WaitSettled(5 * time.Minute)
	close(stop)
	sampled.Wait()
	took := time.Since(start)

	bad := 0
	for i, id := range ids {
		r := p.Row(id)
		attempts := 1
		if i%retryEvery == 0 {
			attempts = 2
		}
		if r.Status != "done" || r.Stage != "c" || r.Attempts != attempts || r.DispatchError != "" ||
			r.Headers["a"] != "go" || r.Headers["b"] != "python" || r.Headers["c"] != "go" {
			if bad++; bad <= 5 {
				t.Errorf("message %d (%q): %+v", id, payloads[i], r)
			}
		}
	}
	p.Check()
	if got, want := p.Int64("SELECT count(*) FROM pepsi.state WHERE status = 'done'"), int64(n); got != want {
		t.Errorf("%d messages done, want %d", got, want)
	}
	if got, want := p.Int64("SELECT paused FROM pepsi.dispatch_stats"), int64(3*n/retryEvery); got != want {
		t.Errorf("dispatch_stats.paused = %d, want %d (the retries, once per stage)", got, want)
	}
	for _, stage := range []string{"a", "b", "c"} {
		// Every message passes once, and the retries once more (the pause).
		if got, want := p.Int64("SELECT processed FROM pepsi.stage_stats WHERE stage = $1", stage), int64(n+n/retryEvery); got != want {
			t.Errorf("stage %s: stage_stats.processed = %d, want %d", stage, got, want)
		}
		if got := p.Int64("SELECT failed + timeouts + crashes FROM pepsi.stage_stats WHERE stage = $1", stage); got != 0 {
			t.Errorf("stage %s: %d failures, timeouts and crashes in stage_stats, want none", stage, got)
		}
	}
	if most > bouncerPool || most == 0 {
		t.Errorf("at most %d worker sessions on the server in %d samples, want 1 to %d (the pool)", most, samples, bouncerPool)
	}
	if strings.Contains(p.Logs.String(), "prepared statement") {
		t.Errorf("prepared-statement errors in the log")
	}
	t.Logf("%d messages through 3 stages (Go, Python, Go; 8 workers each, %d server connections) in %v; at most %d worker sessions on the server",
		n, bouncerPool, took.Round(time.Millisecond), most)

	// The dispatcher, pointed at the same pooler, refuses to start and
	// leaves the dispatcher lock free.
	conf := filepath.Join(t.TempDir(), "pepsi.conf")
	if err := os.WriteFile(conf, []byte("[database]\nDSN = "+b.dsn(p.DSN)+"\n\n[stage-a]\nPROGRAM = "+goStage+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pepsi, "-c", conf, "dispatch")
	cmd.Env = append(os.Environ(), "PEPSI_DSN=", "PEPSI_CONFIG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	refusedAt := time.Now()
	err := cmd.Run()
	refusal := time.Since(refusedAt)
	const want = "pepsi dispatch: the dispatcher needs a direct or session-mode connection to PostgreSQL, not a pooler in transaction mode: "
	if code := cmd.ProcessState.ExitCode(); code != 1 || stdout.Len() != 0 ||
		!strings.HasPrefix(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("pepsi dispatch through the pooler: exit %d (%v), stdout %q, stderr %q; want exit 1 and one line %q…",
			code, err, stdout.String(), stderr.String(), want)
	}
	t.Logf("refused in %v: %s", refusal.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	lis, err := queue.Dial(ctx, p.DSN, "pepsi_ingress")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close(context.Background())
	if holder, err := lis.TryLock(ctx); err != nil {
		t.Errorf("the dispatcher lock after the refusal: %v (server pid %d)", err, holder)
	}
	b.stop() // before the test database is dropped, with its server connections
	if t.Failed() {
		t.Logf("pgbouncer log:\n%s", b.log)
		t.Logf("dispatcher log:\n%s", p.Logs)
	}
}

// bouncer is a PgBouncer process the test started.
type bouncer struct {
	dir  string // its unix socket directory, config and auth file
	port int
	user string // the user clients log in as
	log  *workertest.Buffer
	stop func() // stops it (once); also done when the test ends
}

// dsn is the DSN of the database that server names, through the pooler.
func (b *bouncer) dsn(server string) string {
	cfg, err := pgconn.ParseConfig(server)
	if err != nil {
		panic(err) // the test database's own DSN
	}
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s", b.dir, b.port, cfg.Database, b.user)
}

// findPgBouncer returns the pgbouncer executable: on PATH, or where
// Debian's package puts it (/usr/sbin, not on every user's PATH). When
// there is none the test is skipped, or fails in CI.
func findPgBouncer(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr == nil {
			path, err = "/usr/sbin/pgbouncer", nil
		}
	}
	if err == nil {
		need(t, "pgbouncer", "apt-get install -y pgbouncer", path, "--version")
		return path
	}
	msg := "pgbouncer is not installed; install it: apt-get install -y pgbouncer"
	if inCI {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startPgBouncer starts a PgBouncer of the test's own, in transaction
// mode with a pool of bouncerPool server connections per database, in
// front of the test server (PEPSI_TEST_DSN): a config and an auth file in
// a temporary directory, its unix socket there too, and a free TCP port
// on 127.0.0.1. Every database of the server is reachable through it
// under its own name. It is stopped (its own process, and only it) when
// the test ends.
//
// PgBouncer refuses to run as root: as root the test runs it as the
// postgres user (-u), which then also logs in to a server on a unix socket
// as the postgres role (peer authentication would refuse it any other).
func startPgBouncer(t *testing.T) *bouncer {
	t.Helper()
	bin := findPgBouncer(t)
	server, err := pgconn.ParseConfig(pgtest.ServerDSN())
	if err != nil {
		t.Fatalf("PEPSI_TEST_DSN: %v", err)
	}
	b := &bouncer{dir: t.TempDir(), user: server.User, log: &workertest.Buffer{}}
	login := server.User
	var args []string
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgbouncer refuses to run as root, and there is no postgres user to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		// The socket directory is the postgres user's; the test's
		// temporary directory above it (0700) must let it through.
		if err := os.Chown(b.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Dir(b.dir), 0o711); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-u", "postgres")
		if strings.HasPrefix(server.Host, "/") {
			login = "postgres"
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.port = l.Addr().(*net.TCPAddr).Port
	l.Close()

	target := fmt.Sprintf("host=%s port=%d user=%s", server.Host, server.Port, login)
	if server.Password != "" {
		target += " password='" + strings.ReplaceAll(server.Password, "'", "''") + "'"
	}
	ini := filepath.Join(b.dir, "pgbouncer.ini")
	auth := filepath.Join(b.dir, "users.txt")
	conf := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir = %s
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 200
`, target, b.port, b.dir, auth, bouncerPool)
	for _, f := range []struct{ path, text string }{{ini, conf}, {auth, fmt.Sprintf("%q \"\"\n", b.user)}} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(bin, append(args, ini)...)
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.stop = sync.OnceFunc(func() {
		// SIGTERM: PgBouncer's immediate shutdown. Only this process.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	t.Cleanup(b.stop)

	// Wait until it serves a query from the server, or give up.
	probe := b.dsn(pgtest.ServerDSN()) + " connect_timeout=2"
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := pgconn.Connect(ctx, probe)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			_, err = c.Exec(ctx, "SELECT 1").ReadAll()
			return err
		}()
		if err == nil {
			return b
		}
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited: %v\n%s", cmd.ProcessState, b.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer on %s port %d does not answer after 30 s: %v\n%s", b.dir, b.port, err, b.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
