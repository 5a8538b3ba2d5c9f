package main

// The private cluster: the server scripts/pg-local started (node soak_a,
// in -cluster) and a synchronous streaming standby of it (node soak_b,
// beside it), which the soak crashes, restarts and fails over. Both
// listen on unix sockets only, each in its own directory; the soak and
// pepsi reach whichever takes writes through a multi-host DSN
// (target_session_attrs=read-write). After a failover the old primary is
// made again, a new standby of the new one (pg_basebackup), so that the
// next failover goes the other way.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// node is one server of the pair: its data in dir/data, its socket in dir.
type node struct {
	name string // its application_name as a standby
	dir  string
	port int
}

func (n *node) data() string { return filepath.Join(n.dir, "data") }

// conninfo is the key=value DSN of n's database postgres.
func (n *node) conninfo() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", n.dir, n.port)
}

// cluster is the primary and its standby.
type cluster struct {
	bin      string // initdb, pg_ctl, pg_basebackup
	owner    string // runs the servers ("" when that is us)
	uid, gid int
	nodes    [2]*node
	primary  int // index of the node that takes writes
	keep     bool
	logf     func(string, ...any)

	promotions, standbys []time.Duration // how long each took
}

// newCluster takes over the running server in dir (started by
// scripts/pg-local on port) and gives it a synchronous standby in
// dir-b on standbyPort.
func newCluster(dir string, port, standbyPort int, keep bool, logf func(string, ...any)) (*cluster, error) {
	c := &cluster{keep: keep, logf: logf}
	c.nodes[0] = &node{name: "soak_a", dir: dir, port: port}
	c.nodes[1] = &node{name: "soak_b", dir: strings.TrimSuffix(dir, "/") + "-b", port: standbyPort}
	fi, err := os.Stat(c.nodes[0].data())
	if err != nil {
		return nil, fmt.Errorf("the private cluster: %v", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	c.uid, c.gid = int(st.Uid), int(st.Gid)
	if c.uid != os.Getuid() {
		u, err := user.LookupId(strconv.Itoa(c.uid))
		if err != nil {
			return nil, fmt.Errorf("the owner of %s: %v", c.nodes[0].data(), err)
		}
		c.owner = u.Username
	}
	if c.bin, err = pgBinDir(c.nodes[0].data()); err != nil {
		return nil, err
	}
	// Commits acknowledged are commits a crash keeps and the standby has
	// (pg-local runs with synchronous_commit off); each node's own
	// settings are in soak-node.conf, written again at each change of role.
	conf := `
# bench/cmd/soak: a synchronous streaming standby; node settings in soak-node.conf
synchronous_commit = on
wal_keep_size = 1GB
# A standby whose primary restarted streams again at once (5 s by default,
# in which the primary's commits wait).
wal_retrieve_retry_interval = 100ms
include_if_exists = 'soak-node.conf'
`
	f, err := os.OpenFile(filepath.Join(c.nodes[0].data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := c.asPrimary(c.nodes[0], ""); err != nil {
		return nil, err
	}
	if err := c.makeStandby(c.nodes[1]); err != nil {
		return nil, err
	}
	return c, nil
}

// pgBinDir is the directory of the binaries of data's major version.
func pgBinDir(data string) (string, error) {
	if d := os.Getenv("PEPSI_PG_BINDIR"); d != "" {
		return d, nil
	}
	v, err := os.ReadFile(filepath.Join(data, "PG_VERSION"))
	if err != nil {
		return "", err
	}
	d := filepath.Join("/usr/lib/postgresql", strings.TrimSpace(string(v)), "bin")
	if _, err := os.Stat(filepath.Join(d, "pg_basebackup")); err == nil {
		return d, nil
	}
	p, err := exec.LookPath("pg_basebackup")
	if err != nil {
		return "", errors.New("no pg_basebackup for the standby: set PEPSI_PG_BINDIR")
	}
	return filepath.Dir(p), nil
}

// DSN is the multi-host DSN of database postgres on the pair: it
// connects to the node that takes writes.
func (c *cluster) DSN() string {
	a, b := c.nodes[0], c.nodes[1]
	q := url.Values{}
	q.Set("host", a.dir+","+b.dir)
	q.Set("port", fmt.Sprintf("%d,%d", a.port, b.port))
	q.Set("user", "postgres")
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "5")
	return "postgres:///postgres?" + q.Encode()
}

func (c *cluster) current() *node { return c.nodes[c.primary] }
func (c *cluster) other() *node   { return c.nodes[1-c.primary] }

// run runs a binary of c.bin (args[0]) as the servers' owner, from /.
func (c *cluster) run(timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args[0] = filepath.Join(c.bin, args[0])
	if c.owner != "" {
		args = append([]string{"runuser", "-u", c.owner, "--"}, args...)
	}
	cmd := exec.CommandContext(ctx, "env", append([]string{"LC_ALL=C"}, args...)...)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeFile writes a file of a node's data directory, owned by the owner.
func (c *cluster) writeFile(n *node, name, text string) error {
	path := filepath.Join(n.data(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Chown(path, c.uid, c.gid)
}

// asPrimary makes n's settings a primary's, waiting for the standby named
// sync ("" for none), and reloads them.
func (c *cluster) asPrimary(n *node, sync string) error {
	text := "synchronous_standby_names = ''\n"
	if sync != "" {
		text = fmt.Sprintf("synchronous_standby_names = '\"%s\"'\n", sync)
	}
	if err := c.writeFile(n, "soak-node.conf", text); err != nil {
		return err
	}
	return c.run(time.Minute, "pg_ctl", "reload", "-D", n.data())
}

// makeStandby makes n afresh as a streaming standby of the primary
// (pg_basebackup), starts it and makes the primary wait for it.
func (c *cluster) makeStandby(n *node) error {
	p := c.current()
	start := time.Now()
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(n.dir, c.uid, c.gid); err != nil {
		return err
	}
	if err := os.RemoveAll(n.data()); err != nil {
		return err
	}
	if err := c.run(30*time.Minute, "pg_basebackup", "-d", p.conninfo(), "-D", n.data(), "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return err
	}
	// pepsi-local.conf is pg-local's: the node's port and socket.
	if err := c.writeFile(n, "pepsi-local.conf", fmt.Sprintf("port = %d\nunix_socket_directories = '%s'\n", n.port, n.dir)); err != nil {
		return err
	}
	if err := c.writeFile(n, "soak-node.conf", fmt.Sprintf("synchronous_standby_names = ''\nprimary_conninfo = '%s application_name=%s'\n", p.conninfo(), n.name)); err != nil {
		return err
	}
	if err := c.writeFile(n, "standby.signal", ""); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(n.data(), "postmaster.pid"))
	if err := c.start(n); err != nil {
		return err
	}
	if err := c.asPrimary(p, n.name); err != nil {
		return err
	}
	err := c.waitQuery(p, 2*time.Minute, "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND sync_state = 'sync'", n.name)
	if err != nil {
		return fmt.Errorf("%s a synchronous standby of %s: %v", n.name, p.name, err)
	}
	took := time.Since(start)
	c.standbys = append(c.standbys, took)
	c.logf("%s is a synchronous standby of %s (made in %v)", n.name, p.name, took.Round(time.Millisecond))
	return nil
}

// waitQuery waits until sql, a count on n's database postgres, is not 0.
func (c *cluster) waitQuery(n *node, timeout time.Duration, sql string, args ...any) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var count int64
		conn, err := pgx.Connect(ctx, n.conninfo())
		if err == nil {
			err = conn.QueryRow(ctx, sql, args...).Scan(&count)
			conn.Close(ctx)
		}
		cancel()
		if err == nil && count > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("not yet")
			}
			return fmt.Errorf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) start(n *node) error {
	return c.run(5*time.Minute, "pg_ctl", "start", "-D", n.data(), "-l", filepath.Join(n.dir, "postgres.log"), "-w", "-t", "300")
}

func (c *cluster) stop(n *node, mode string) error {
	return c.run(5*time.Minute, "pg_ctl", "stop", "-D", n.data(), "-m", mode, "-w", "-t", "300")
}

// restart stops the primary (mode fast: a clean restart; immediate: a
// crash) and starts it again, after a second without a server.
func (c *cluster) restart(mode string) error {
	p := c.current()
	if err := c.stop(p, mode); err != nil {
		return err
	}
	time.Sleep(time.Second)
	return c.start(p)
}

// failover crashes the primary (an immediate stop), promotes the standby
// and, once the new primary takes writes on its own, makes the old one
// its standby again.
func (c *cluster) failover() error {
	old, next := c.current(), c.other()
	if err := c.stop(old, "immediate"); err != nil {
		return err
	}
	start := time.Now()
	if err := c.run(2*time.Minute, "pg_ctl", "promote", "-D", next.data(), "-w", "-t", "60"); err != nil {
		return err
	}
	c.primary = 1 - c.primary
	// Alone, it must not wait for a standby.
	if err := c.asPrimary(next, ""); err != nil {
		return err
	}
	promoted := time.Since(start)
	c.promotions = append(c.promotions, promoted)
	c.logf("%s promoted in %v; making %s its standby", next.name, promoted.Round(time.Millisecond), old.name)
	return c.makeStandby(old)
}

// close stops the standby node (soak_b; pg-local stops soak_a) and,
// unless kept, removes it.
func (c *cluster) close() {
	if c.keep {
		c.logf("kept the pair: %s is the primary (%s), %s its standby", c.current().name, c.current().dir, c.other().name)
		return
	}
	b := c.nodes[1]
	if _, err := os.Stat(filepath.Join(b.data(), "postmaster.pid")); err == nil {
		if err := c.stop(b, "immediate"); err != nil {
			c.logf("stop %s: %v", b.name, err)
		}
	}
	_ = os.RemoveAll(b.dir)
}

// summary says where the pair ended and how long its failovers took.
func (c *cluster) summary() string {
	longest := func(ds []time.Duration) time.Duration {
		var m time.Duration
		for _, d := range ds {
			m = max(m, d)
		}
		return m.Round(time.Millisecond)
	}
	return fmt.Sprintf("%s the primary, %s its synchronous standby; %d promotions (the longest %v), %d standbys made (the longest %v)",
		c.current().name, c.other().name, len(c.promotions), longest(c.promotions), len(c.standbys), longest(c.standbys))
}
