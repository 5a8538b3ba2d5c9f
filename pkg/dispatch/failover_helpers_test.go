package dispatch

// Helpers for the failover test (failover_test.go): a primary and a
// streaming standby of it, private clusters on this machine listening on
// 127.0.0.1, which a test crashes, promotes and brings back as a standby.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgNode is one server of a replicated pair: its data in dir/data, its
// socket in dir, TCP on 127.0.0.1:port.
type pgNode struct {
	t    *testing.T
	name string // also its application_name as a standby
	bin  string // the directory of initdb, pg_ctl, pg_basebackup, pg_rewind
	dir  string
	port int
}

// pgBinDir returns the directory of the newest PostgreSQL server binaries
// under /usr/lib/postgresql, failing t when there are none.
func pgBinDir(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_basebackup")
	best, bestMajor := "", -1
	for _, d := range dirs {
		major, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(d))))
		if err == nil && major > bestMajor {
			best, bestMajor = filepath.Dir(d), major
		}
	}
	if best == "" {
		t.Fatal("the failover test needs PostgreSQL's server binaries (initdb, pg_basebackup) under /usr/lib/postgresql/*/bin")
	}
	return best
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pgOwner is the user the servers run as: postgres when the tests run as
// root (initdb and postgres refuse root), else the tests' own user ("").
func pgOwner(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		return ""
	}
	if _, err := user.Lookup("postgres"); err != nil {
		t.Fatal("the failover test runs as root and needs a user postgres to own its servers")
	}
	return "postgres"
}

// newFailoverBase makes the directory the pair lives in, reachable by the
// servers' owner (not t.TempDir(), which is private), and removes it when
// t ends; the nodes made in it are stopped first.
func newFailoverBase(t *testing.T, nodes *[]*pgNode) string {
	t.Helper()
	base, err := os.MkdirTemp("", "pepsi-failover-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range *nodes {
			n.stopImmediate(false)
		}
		os.RemoveAll(base)
	})
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if owner := pgOwner(t); owner != "" {
		if out, err := exec.Command("chown", owner+":", base).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v\n%s", base, err, out)
		}
	}
	return base
}

// asOwner runs a command as the servers' owner, from /, and returns its
// combined output.
func (n *pgNode) asOwner(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if owner := pgOwner(n.t); owner != "" {
		args = append([]string{"runuser", "-u", owner, "--"}, args...)
	}
	cmd := exec.CommandContext(ctx, "env", append([]string{"LC_ALL=C"}, args...)...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must runs an owner's command (a binary of n.bin) and fails the test if
// it fails; it logs how long it took.
func (n *pgNode) must(what string, args ...string) {
	n.t.Helper()
	start := time.Now()
	args[0] = filepath.Join(n.bin, args[0])
	out, err := n.asOwner(2*time.Minute, args...)
	if err != nil {
		n.t.Fatalf("%s %s: %v\n%s\n%s", n.name, what, err, out, n.serverLog())
	}
	n.t.Logf("%s %s: %v", n.name, what, time.Since(start).Round(time.Millisecond))
}

// data is the node's data directory.
func (n *pgNode) data() string { return filepath.Join(n.dir, "data") }

// serverLog is the tail of the node's server log, for a failure message.
func (n *pgNode) serverLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Sprintf("%s's server log (tail):\n%s", n.name, b)
}

// newPrimary initdbs a primary in base/name, with what a standby and
// pg_rewind need (wal_log_hints, full_page_writes, the WAL back to the
// checkpoint before a divergence kept), and starts it.
func newPrimary(t *testing.T, base, name string, nodes *[]*pgNode) *pgNode {
	t.Helper()
	n := &pgNode{t: t, name: name, bin: pgBinDir(t), dir: filepath.Join(base, name), port: freePort(t)}
	*nodes = append(*nodes, n)
	if out, err := n.asOwner(time.Minute, "mkdir", "-m", "0755", n.dir); err != nil {
		t.Fatalf("mkdir %s: %v\n%s", n.dir, err, out)
	}
	n.must("initdb", "initdb", "-D", n.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	// postgresql.conf is shared by the pair (pg_basebackup and pg_rewind
	// copy it); what is the node's own (its port and socket) is node.conf,
	// written again after each copy.
	conf := `
# pkg/dispatch failover test: a replicated pair on 127.0.0.1
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = on
full_page_writes = on
wal_log_hints = on
wal_level = replica
max_wal_senders = 10
wal_keep_size = 1GB
hot_standby = on
max_connections = 200
shared_buffers = 64MB
log_min_messages = warning
include 'node.conf'
`
	f, err := os.OpenFile(filepath.Join(n.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(conf); err != nil {
		t.Fatal(err)
	}
	f.Close()
	n.writeNodeConf()
	n.start()
	return n
}

// writeNodeConf writes the node's own settings: its port and socket.
func (n *pgNode) writeNodeConf() {
	n.t.Helper()
	path := filepath.Join(n.data(), "node.conf")
	if err := os.WriteFile(path, fmt.Appendf(nil, "port = %d\nunix_socket_directories = '%s'\n", n.port, n.dir), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if owner := pgOwner(n.t); owner != "" {
		if out, err := exec.Command("chown", owner+":", path).CombinedOutput(); err != nil {
			n.t.Fatalf("chown %s: %v\n%s", path, err, out)
		}
	}
}

// newStandby makes a streaming standby of primary in base/name
// (pg_basebackup) and starts it; its application_name is name.
func newStandby(t *testing.T, base, name string, primary *pgNode, nodes *[]*pgNode) *pgNode {
	t.Helper()
	n := &pgNode{t: t, name: name, bin: primary.bin, dir: filepath.Join(base, name), port: freePort(t)}
	*nodes = append(*nodes, n)
	if out, err := n.asOwner(time.Minute, "mkdir", "-m", "0755", n.dir); err != nil {
		t.Fatalf("mkdir %s: %v\n%s", n.dir, err, out)
	}
	n.must("pg_basebackup", "pg_basebackup", "-d", primary.conninfo("postgres"), "-D", n.data(),
		"-X", "stream", "-c", "fast", "--no-sync")
	n.followConf(primary)
	n.start()
	return n
}

// followConf makes n a standby of primary at its next start:
// standby.signal, and primary_conninfo naming n (synchronous_standby_names
// goes by that name).
func (n *pgNode) followConf(primary *pgNode) {
	n.t.Helper()
	n.writeNodeConf()
	files := map[string]string{
		"standby.signal": "",
		"standby.conf":   fmt.Sprintf("primary_conninfo = '%s application_name=%s'\n", primary.conninfo("postgres"), n.name),
	}
	for name, text := range files {
		path := filepath.Join(n.data(), name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			n.t.Fatal(err)
		}
		if owner := pgOwner(n.t); owner != "" {
			if out, err := exec.Command("chown", owner+":", path).CombinedOutput(); err != nil {
				n.t.Fatalf("chown %s: %v\n%s", path, err, out)
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(n.data(), "node.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("include 'standby.conf'\n"); err != nil {
		n.t.Fatal(err)
	}
}

// conninfo is the node's key=value DSN for database db.
func (n *pgNode) conninfo(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s", n.port, db)
}

// start starts the server and waits until it takes connections.
func (n *pgNode) start() {
	n.t.Helper()
	n.must("start", "pg_ctl", "start", "-D", n.data(), "-l", filepath.Join(n.dir, "postgres.log"), "-w", "-t", "60")
}

// stopImmediate stops the server as a crash would; must says whether a
// failure fails the test (not in a cleanup, where it may not run).
func (n *pgNode) stopImmediate(must bool) {
	n.t.Helper()
	if _, err := os.Stat(filepath.Join(n.data(), "postmaster.pid")); err != nil {
		return
	}
	out, err := n.asOwner(time.Minute, filepath.Join(n.bin, "pg_ctl"), "stop", "-D", n.data(), "-m", "immediate", "-w", "-t", "60")
	if err != nil && must {
		n.t.Fatalf("%s: pg_ctl stop -m immediate: %v\n%s", n.name, err, out)
	}
}

// exec runs sql on the node's postgres database, on a session of its own.
func (n *pgNode) exec(sql string, args ...any) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.conninfo("postgres"))
	if err != nil {
		n.t.Fatalf("%s: connect: %v", n.name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		n.t.Fatalf("%s: %s: %v", n.name, sql, err)
	}
}

// query runs a one-value query on database db of the node, returning its
// error rather than failing: the server may be starting or stopping.
func (n *pgNode) query(db, sql string, dest any, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.conninfo(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest)
}

// multiHost is the DSN of database db on the nodes, in their order, that
// connects to the one that takes writes (target_session_attrs=read-write).
func multiHost(db string, nodes ...*pgNode) string {
	hosts, ports := make([]string, len(nodes)), make([]string, len(nodes))
	for i, n := range nodes {
		hosts[i], ports[i] = "127.0.0.1", strconv.Itoa(n.port)
	}
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=%s target_session_attrs=read-write connect_timeout=5",
		strings.Join(hosts, ","), strings.Join(ports, ","), db)
}

// rejoin makes the node, stopped after a crash, a standby of the new
// primary (pg_rewind takes back what it wrote that the new primary never
// had) and starts it.
func (n *pgNode) rejoin(primary *pgNode) {
	n.t.Helper()
	// pg_rewind reads the source's timeline from its control file, which
	// a promotion updates only at its next checkpoint.
	primary.exec("CHECKPOINT")
	n.must("pg_rewind", "pg_rewind", "-D", n.data(), "--source-server", primary.conninfo("postgres"), "--no-sync")
	n.followConf(primary)
	n.start()
}
