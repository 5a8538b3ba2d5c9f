// Command soak drives N messages through a three-stage pipeline run by the
// real `pepsi dispatch` and the test worker, while it injects faults one
// after another (faults.go): worker kill -9, pg_terminate_backend of the
// dispatcher's sessions, dispatcher kill -9 and a restart, SIGTERM and a
// restart, a standby dispatcher's takeover from a killed one and, on its
// private cluster (-cluster), a server crash (an immediate stop), a clean
// restart and a failover to a synchronous streaming standby
// (cluster.go). Hangs, garbage output and crashes come from the payloads
// of a few messages. At the end it prints a report (report.go): faults
// injected per kind; messages per status, lost and moved twice; the
// statistics identity; wall time. scripts/soak builds and runs it.
//
// A message moved twice at a stage was moved by two passes there (the
// test worker records each committed pass, in the transaction of its
// move). That is tolerated only for messages that were in flight
// (running) at a fault; others are counted as unexplained, and make the
// exit status 1, as do lost messages, messages left running, failures
// without a reason, and statistics that do not add up.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

var (
	nFlag         = flag.Int("n", 1000000, "messages")
	dsnFlag       = flag.String("dsn", "", "DSN of the server (a database is created on it); with -cluster, of its first node")
	pepsiFlag     = flag.String("pepsi", "bin/pepsi", "the pepsi binary")
	workerFlag    = flag.String("worker", "", "the test worker binary")
	clusterFlag   = flag.String("cluster", "", "directory of the private cluster scripts/pg-local started (PEPSI_PG_DIR): enables the server faults and a standby in DIR-b")
	portFlag      = flag.Int("port", 0, "with -cluster: the cluster's port")
	standbyPort   = flag.Int("standby-port", 0, "with -cluster: the standby's port (default -port + 1)")
	dirFlag       = flag.String("dir", "", "directory for the configuration and the dispatchers' logs")
	noSigkillFlag = flag.Bool("no-sigkill", false, "no dispatcher killed outright (kill -9): the statistics' identity must then hold exactly")
	faultsFlag    = flag.Int("faults", 0, "faults to inject in all, the kinds in turn, spread over the first 80 % of the messages by progress (0: -faults-per-kind of each)")
	perKindFlag   = flag.Int("faults-per-kind", 10, "faults of each kind, when -faults is 0")
	parallelism   = flag.Int("parallelism", 2, "PARALLELISM of each stage")
	queueLimit    = flag.Int("queue-limit", 32, "QUEUE_LIMIT of each stage")
	stallFlag     = flag.Duration("stall", 5*time.Minute, "give up after this long without progress")
	keepFlag      = flag.Bool("keep", false, "keep the database (and the cluster's standby)")
)

type soak struct {
	ctx      context.Context
	server   string // DSN of the server's database postgres (multi-host with -cluster)
	dsn      string // of the soak's database
	dbName   string
	conn     *pgx.Conn
	conf     string
	dir      string
	seq      int
	active   *proc
	standby  *proc
	cluster  *cluster // nil without -cluster
	kinds    []string // the fault kinds this run injects, in turn
	faults   int      // how many in all
	injected map[string]int
	orphans  int // workers still running after the last dispatcher stopped
	notes    []string
	start    time.Time
}

func main() {
	flag.Parse()
	if *dsnFlag == "" || *workerFlag == "" {
		fmt.Fprintln(os.Stderr, "soak: -dsn and -worker are required")
		os.Exit(2)
	}
	if *clusterFlag != "" && *portFlag <= 0 {
		fmt.Fprintln(os.Stderr, "soak: -cluster needs -port")
		os.Exit(2)
	}
	if *faultsFlag < 0 || *perKindFlag < 0 {
		fmt.Fprintln(os.Stderr, "soak: -faults and -faults-per-kind must not be negative")
		os.Exit(2)
	}
	s := &soak{ctx: context.Background(), injected: make(map[string]int), server: *dsnFlag}
	s.kinds = faultKinds(*clusterFlag != "", *noSigkillFlag)
	s.faults = *faultsFlag
	if s.faults == 0 {
		s.faults = *perKindFlag * len(s.kinds)
	}
	code, err := s.run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak %s: %s\n", time.Since(s.start).Round(time.Second), fmt.Sprintf(format, args...))
}

func (s *soak) run() (int, error) {
	s.start = time.Now()
	s.dir = *dirFlag
	if s.dir == "" {
		d, err := os.MkdirTemp("", "pepsi-soak-")
		if err != nil {
			return 0, err
		}
		s.dir = d
	}
	if *clusterFlag != "" {
		sp := *standbyPort
		if sp == 0 {
			sp = *portFlag + 1
		}
		c, err := newCluster(*clusterFlag, *portFlag, sp, *keepFlag, s.logf)
		if c != nil {
			defer c.close()
		}
		if err != nil {
			return 0, err
		}
		s.cluster, s.server = c, c.DSN()
	}
	if err := s.createDB(); err != nil {
		return 0, err
	}
	defer s.dropDB()
	if err := s.enqueue(); err != nil {
		return 0, err
	}
	if err := s.writeConf(); err != nil {
		return 0, err
	}
	s.logf("dispatching %d messages, %d faults (%s in turn); logs in %s", *nFlag, s.faults, strings.Join(s.kinds, ", "), s.dir)
	begin := time.Now()
	s.active = s.startDispatcher(false)
	if err := s.active.waitLog("dispatcher started", 1, time.Minute); err != nil {
		return 0, err
	}
	stalled := s.drive()
	wall := time.Since(begin)
	if s.active != nil {
		if code := s.active.stop(syscall.SIGTERM); code != 0 {
			s.note("the last dispatcher exited %d on SIGTERM", code)
		}
	}
	if s.standby != nil {
		s.standby.stop(syscall.SIGKILL)
	}
	s.killWorkers()
	return s.report(wall, stalled)
}

// createDB creates a fresh database on the server, migrates it and adds
// the test worker's tables.
func (s *soak) createDB() error {
	s.dbName = fmt.Sprintf("pepsi_soak_%d", time.Now().Unix())
	if err := pgadmin.Recreate(s.ctx, s.server, s.dbName); err != nil {
		return err
	}
	s.dsn = pgadmin.WithDatabase(s.server, s.dbName)
	var err error
	if s.conn, err = pgx.Connect(s.ctx, s.dsn); err != nil {
		return err
	}
	if _, err := queue.Migrate(s.ctx, s.conn); err != nil {
		return err
	}
	// test_passes is written once per stage pass, in the pass's
	// transaction. Logged: a crash empties an unlogged table, and a
	// standby has none of its rows.
	_, err = s.conn.Exec(s.ctx, `
		CREATE TABLE test_passes (id bigint, stage text, pid int, at timestamptz DEFAULT clock_timestamp());
		CREATE TABLE test_workers (pid int, stage text, args text, config text);
		CREATE TABLE soak_inflight (id bigint PRIMARY KEY);
		CREATE TABLE soak_faults (n int, kind text, at timestamptz DEFAULT clock_timestamp())`)
	return err
}

func (s *soak) dropDB() {
	if *keepFlag {
		s.logf("kept the database: %s", s.dsn)
		return
	}
	if err := pgadmin.Drop(s.ctx, s.server, s.dbName); err != nil {
		s.logf("drop database: %v", err)
	}
}

// enqueue puts N messages at parse with COPY, in chunks.
func (s *soak) enqueue() error {
	db, err := queue.Open(s.ctx, s.dsn, queue.Options{App: "pepsi soak", MaxConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	const chunk = 50000
	for off := 0; off < *nFlag; off += chunk {
		n := min(chunk, *nFlag-off)
		ps := make([][]byte, n)
		for i := range ps {
			k := off + i
			p := plain
			if k%every == every/2 {
				f := payloadFaults[(k/every)%len(payloadFaults)]
				p = f.payload
				s.injected[f.kind]++
			}
			ps[i] = []byte(p)
		}
		if _, err := db.EnqueueBulk(s.ctx, queue.Bulk{Stage: "parse", Payloads: ps}); err != nil {
			return err
		}
	}
	s.logf("enqueued %d messages", *nFlag)
	return nil
}

func (s *soak) writeConf() error {
	var b strings.Builder
	fmt.Fprintf(&b, `[database]
DSN = %s

[pepsi-dispatch]
MAX_RUNTIME = 3
WORKER_IDLE_TIMEOUT = 30
POLL_INTERVAL = 10
STATS_INTERVAL = 1
SHUTDOWN_GRACE = 5
SPAWN_COOLDOWN = 1
RECONNECT_MIN = 0.2
RECONNECT_MAX = 2
ORPHAN_SWEEP = 10
RETENTION = 0
`, s.dsn)
	for _, st := range []string{"parse", "enrich", "deliver"} {
		fmt.Fprintf(&b, "\n[stage-%s]\nPROGRAM = %s\nPARALLELISM = %d\nQUEUE_LIMIT = %d\nMAX_MESSAGES = 20000\nRETRIES = 3\nRETRY_DELAY = 0.5\nRETRY_DELAY_MAX = 2\n",
			st, *workerFlag, *parallelism, *queueLimit)
	}
	s.conf = filepath.Join(s.dir, "pepsi.conf")
	return os.WriteFile(s.conf, []byte(b.String()), 0o644)
}

// query runs a one-number query, reconnecting while the server restarts.
func (s *soak) query(sql string) int64 {
	var n int64
	s.scan(sql, &n)
	return n
}

// text runs a one-text query, reconnecting while the server restarts.
func (s *soak) text(sql string) string {
	var t string
	s.scan(sql, &t)
	return t
}

// scan runs a one-row query (no arguments) into dest, reconnecting while
// the server restarts.
func (s *soak) scan(sql string, dest ...any) {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		err := s.conn.QueryRow(ctx, sql).Scan(dest...)
		cancel()
		if err == nil {
			return
		}
		if attempt == 120 {
			panic(fmt.Sprintf("%s: %v", sql, err))
		}
		s.reconnect()
	}
}

// exec runs a statement, reconnecting while the server restarts.
func (s *soak) exec(sql string, args ...any) {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		_, err := s.conn.Exec(ctx, sql, args...)
		cancel()
		if err == nil {
			return
		}
		if attempt == 120 {
			panic(fmt.Sprintf("%s: %v", sql, err))
		}
		s.reconnect()
	}
}

func (s *soak) reconnect() {
	time.Sleep(500 * time.Millisecond)
	if !s.conn.IsClosed() && s.conn.Ping(s.ctx) == nil {
		return
	}
	s.conn.Close(s.ctx)
	if c, err := pgx.Connect(s.ctx, s.dsn); err == nil {
		s.conn = c
	}
}

// drive waits for every message to end, injecting a fault each time
// another share of them has; it reports whether it gave up on a stall. The
// faults are spread over the first 80 % of the messages: messages go on
// ending while a fault's recovery delays the next one, and the last 20 %
// leave room for the faults so delayed to land before the run ends.
func (s *soak) drive() bool {
	n := int64(*nFlag)
	step := max(n*8/10/int64(s.faults+1), 1)
	next, k := step, 0
	last, lastAt, reported := int64(-1), time.Now(), time.Now()
	for {
		ended := s.query("SELECT count(*) FROM pepsi.state WHERE status IN ('done', 'failed')")
		if ended == n {
			return false
		}
		if ended != last {
			last, lastAt = ended, time.Now()
		} else if time.Since(lastAt) > *stallFlag {
			s.note("no progress for %v: gave up with %d of %d ended", *stallFlag, ended, n)
			return true
		}
		if time.Since(reported) > 30*time.Second {
			reported = time.Now()
			el := time.Since(s.start).Seconds()
			s.logf("%d/%d ended (%.0f messages/s overall)", ended, n, float64(ended)/el)
		}
		if s.active != nil && s.active.done() {
			s.note("dispatcher %s exited on its own (%v); started another", s.active.log, s.active.err)
			s.active = s.startDispatcher(false)
		}
		if ended >= next && k < s.faults {
			kind := s.kinds[k%len(s.kinds)]
			k++
			next += step
			s.logf("fault %d: %s (%d ended)", k, kind, ended)
			s.exec("INSERT INTO soak_faults (n, kind) VALUES ($1, $2)", k, kind)
			if err := s.inject(kind); err != nil {
				s.note("fault %s: %v", kind, err)
			}
			s.injected[kind]++
			continue
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (s *soak) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.notes = append(s.notes, msg)
	s.logf("NOTE: %s", msg)
}
