// Command soak drives N messages through a three-stage pipeline run by the
// real `pepsi dispatch` and the test worker, while it injects faults one
// after another: worker kill -9, pg_terminate_backend of the dispatcher's
// sessions, a PostgreSQL restart (when it may: -pg-local), dispatcher
// kill -9 and a restart, SIGTERM and a restart, a standby takeover from a
// killed dispatcher. Hangs, garbage output and crashes come from the payloads of a
// few messages. At the end it prints a table: faults injected per kind;
// messages done, failed, lost and duplicated; wall time. scripts/soak
// builds and runs it.
//
// A duplicated message passed a stage more than once (the test worker
// records each committed pass). That is allowed only for messages that were
// in flight (running) at a fault; others are counted as unexplained, and
// make the exit status 1, as do lost messages and failures without a reason.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

var (
	nFlag       = flag.Int("n", 1000000, "messages")
	dsnFlag     = flag.String("dsn", "", "DSN of the server (a database is created on it)")
	pepsiFlag   = flag.String("pepsi", "bin/pepsi", "the pepsi binary")
	workerFlag  = flag.String("worker", "", "the test worker binary")
	pgLocal     = flag.String("pg-local", "", "scripts/pg-local of the cluster (PEPSI_PG_DIR in the environment): enables server restarts")
	dirFlag     = flag.String("dir", "", "directory for the configuration and the dispatchers' logs")
	faultsFlag  = flag.Int("faults", 60, "faults to inject, spread over the run by progress")
	parallelism = flag.Int("parallelism", 2, "PARALLELISM of each stage")
	queueLimit  = flag.Int("queue-limit", 32, "QUEUE_LIMIT of each stage")
	stallFlag   = flag.Duration("stall", 5*time.Minute, "give up after this long without progress")
	keepFlag    = flag.Bool("keep", false, "keep the database")
)

// kinds are the scheduled faults, in the order they are injected.
var kinds = []string{
	"worker kill -9",
	"pg_terminate_backend (dispatcher sessions)",
	"PostgreSQL restart",
	"dispatcher kill -9 + restart",
	"dispatcher SIGTERM + restart",
	"standby takeover (active kill -9)",
}

// One message in every `every` gets a fault of its own in its payload.
const every = 20000

var payloadFaults = []struct{ kind, payload string }{
	{"hang (fails by MAX_RUNTIME)", "parse=advance:enrich enrich=hang deliver=finish"},
	{"garbage output (fails)", "parse=advance:enrich enrich=advance:deliver deliver=garbage"},
	{"hang once, then retried", "parse=hangonce:enrich enrich=advance:deliver deliver=finish"},
	{"garbage once, then retried", "parse=advance:enrich enrich=garbageonce:deliver deliver=finish"},
	{"crash once, then retried", "parse=advance:enrich enrich=advance:deliver deliver=crashonce"},
}

const plain = "parse=advance:enrich enrich=advance:deliver deliver=finish"

type soak struct {
	ctx      context.Context
	dsn      string
	dbName   string
	conn     *pgx.Conn
	conf     string
	dir      string
	seq      int
	active   *proc
	standby  *proc
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
	s := &soak{ctx: context.Background(), injected: make(map[string]int)}
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
	s.logf("dispatching %d messages; logs in %s", *nFlag, s.dir)
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
	if err := pgadmin.Recreate(s.ctx, *dsnFlag, s.dbName); err != nil {
		return err
	}
	s.dsn = pgadmin.WithDatabase(*dsnFlag, s.dbName)
	var err error
	if s.conn, err = pgx.Connect(s.ctx, s.dsn); err != nil {
		return err
	}
	if _, err := queue.Migrate(s.ctx, s.conn); err != nil {
		return err
	}
	// test_passes is written once per stage pass: unlogged, so that it
	// costs the server no WAL (a clean restart keeps it).
	_, err = s.conn.Exec(s.ctx, `
		CREATE UNLOGGED TABLE test_passes (id bigint, stage text, pid int, at timestamptz DEFAULT clock_timestamp());
		CREATE TABLE test_workers (pid int, stage text, args text, config text);
		CREATE TABLE soak_inflight (id bigint PRIMARY KEY)`)
	return err
}

func (s *soak) dropDB() {
	if *keepFlag {
		s.logf("kept the database: %s", s.dsn)
		return
	}
	if err := pgadmin.Drop(s.ctx, *dsnFlag, s.dbName); err != nil {
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

// proc is a running `pepsi dispatch`.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

func (s *soak) startDispatcher(standby bool) *proc {
	s.seq++
	args := []string{"-c", s.conf, "dispatch"}
	if standby {
		args = append(args, "--standby")
	}
	p := &proc{log: filepath.Join(s.dir, fmt.Sprintf("dispatch-%02d.log", s.seq)), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		panic(err)
	}
	p.cmd = exec.Command(*pepsiFlag, args...)
	p.cmd.Stderr = f
	p.cmd.Env = append(os.Environ(), "PEPSI_DSN="+s.dsn)
	if err := p.cmd.Start(); err != nil {
		panic(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p
}

func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitLog waits until the process's log has n lines containing what.
func (p *proc) waitLog(what string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		data, _ := os.ReadFile(p.log)
		if strings.Count(string(data), what) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q after %v", p.log, what, timeout)
		}
		if p.done() {
			return fmt.Errorf("%s: exited (%v) before %q", p.log, p.err, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop signals the process and waits for it; it returns the exit status
// (-1 when killed by a signal).
func (p *proc) stop(sig syscall.Signal) int {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return p.cmd.ProcessState.ExitCode()
}

// query runs a one-number query, reconnecting while the server restarts.
func (s *soak) query(sql string, args ...any) int64 {
	for attempt := 0; ; attempt++ {
		var n int64
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		err := s.conn.QueryRow(ctx, sql, args...).Scan(&n)
		cancel()
		if err == nil {
			return n
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
// another share of them has; it reports whether it gave up on a stall.
func (s *soak) drive() bool {
	n := int64(*nFlag)
	step := max(n/int64(*faultsFlag+1), 1)
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
		if ended >= next && k < *faultsFlag {
			kind := kinds[k%len(kinds)]
			k++
			next += step
			if kind == "PostgreSQL restart" && *pgLocal == "" {
				kind = kinds[0]
			}
			s.logf("fault %d: %s (%d ended)", k, kind, ended)
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

// markInflight records the messages running now as in flight at a fault.
func (s *soak) markInflight() {
	s.exec("INSERT INTO soak_inflight SELECT id FROM pepsi.state WHERE status = 'running' ON CONFLICT DO NOTHING")
}

func (s *soak) inject(kind string) error {
	switch kind {
	case "worker kill -9":
		// One of the active dispatcher's workers (not an orphan left by a
		// killed one).
		var pids []int
		for deadline := time.Now().Add(30 * time.Second); len(pids) == 0 && time.Now().Before(deadline); {
			for _, pid := range s.liveWorkers() {
				if parent(pid) == s.active.cmd.Process.Pid {
					pids = append(pids, pid)
				}
			}
			if len(pids) == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if len(pids) == 0 {
			return errors.New("no live worker")
		}
		s.markInflight()
		return syscall.Kill(pids[rand.N(len(pids))], syscall.SIGKILL)

	case "pg_terminate_backend (dispatcher sessions)":
		s.markInflight()
		n := s.query(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend'
			  AND pid <> pg_backend_pid() AND application_name NOT LIKE 'testworker %'`)
		if n == 0 {
			return errors.New("no session to terminate")
		}
		// The dispatcher reconnects and keeps working.
		time.Sleep(2 * time.Second)
		if s.active.done() {
			return fmt.Errorf("the dispatcher exited (%v)", s.active.err)
		}
		return nil

	case "PostgreSQL restart":
		s.markInflight()
		if out, err := s.pgLocal("stop"); err != nil {
			return fmt.Errorf("pg-local stop: %v: %s", err, out)
		}
		time.Sleep(time.Second)
		if out, err := s.pgLocal("start"); err != nil {
			return fmt.Errorf("pg-local start: %v: %s", err, out)
		}
		s.reconnect()
		return nil

	case "dispatcher kill -9 + restart":
		// Frozen first, so that what runs is what it had in flight.
		_ = s.active.cmd.Process.Signal(syscall.SIGSTOP)
		s.markInflight()
		s.active.stop(syscall.SIGKILL)
		s.active = s.startDispatcher(false)
		return s.active.waitLog("dispatcher started", 1, 2*time.Minute)

	case "dispatcher SIGTERM + restart":
		code := s.active.stop(syscall.SIGTERM)
		if n := s.query("SELECT count(*) FROM pepsi.state WHERE status = 'running'"); n != 0 {
			s.note("%d messages left running after SIGTERM", n)
		}
		s.active = s.startDispatcher(false)
		if code != 0 {
			return fmt.Errorf("exit %d on SIGTERM", code)
		}
		return s.active.waitLog("dispatcher started", 1, 2*time.Minute)

	case "standby takeover (active kill -9)":
		s.standby = s.startDispatcher(true)
		if err := s.standby.waitLog("standby: waiting for the dispatcher lock", 1, time.Minute); err != nil {
			return err
		}
		_ = s.active.cmd.Process.Signal(syscall.SIGSTOP)
		s.markInflight()
		s.active.stop(syscall.SIGKILL)
		s.active, s.standby = s.standby, nil
		if err := s.active.waitLog("standby: took over the dispatcher lock", 1, time.Minute); err != nil {
			return err
		}
		return s.active.waitLog("dispatcher started", 1, time.Minute)
	}
	return fmt.Errorf("unknown fault %q", kind)
}

func (s *soak) pgLocal(cmd string) (string, error) {
	out, err := exec.Command("bash", *pgLocal, cmd).CombinedOutput()
	return string(out), err
}

// liveWorkers returns the pids of the test workers still running.
func (s *soak) liveWorkers() []int {
	rows, err := s.conn.Query(s.ctx, "SELECT pid FROM test_workers")
	if err != nil {
		s.reconnect()
		return nil
	}
	pids, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
	var live []int
	worker := filepath.Base(*workerFlag)
	for _, pid := range pids {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmdline), worker) && !zombie(int(pid)) {
			live = append(live, int(pid))
		}
	}
	return live
}

// parent returns the parent pid of pid (0 if unknown).
func parent(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:])) // state ppid ...
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}

// killWorkers kills what is left of the test workers: the hung workers of
// killed dispatchers, which nothing else stops.
func (s *soak) killWorkers() {
	pids := s.liveWorkers()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	s.orphans = len(pids)
}

func (s *soak) report(wall time.Duration, stalled bool) (int, error) {
	n := int64(*nFlag)
	done := s.query("SELECT count(*) FROM pepsi.state WHERE status = 'done'")
	failed := s.query("SELECT count(*) FROM pepsi.state WHERE status = 'failed'")
	unexplained := s.query(`SELECT count(*) FROM pepsi.state WHERE status = 'failed'
		AND coalesce(dispatch_error, '') = '' AND coalesce(error, '') = ''`)
	noState := s.query("SELECT count(*) FROM pepsi.message m LEFT JOIN pepsi.state s USING (id) WHERE s.id IS NULL")
	lost := n - done - failed
	running := s.query("SELECT count(*) FROM pepsi.state WHERE status = 'running'")
	dupMsgs := s.query("SELECT count(DISTINCT id) FROM (SELECT id FROM test_passes GROUP BY id, stage HAVING count(*) > 1) d")
	dupOutside := s.query(`SELECT count(DISTINCT id) FROM (SELECT id FROM test_passes GROUP BY id, stage HAVING count(*) > 1) d
		WHERE NOT EXISTS (SELECT 1 FROM soak_inflight i WHERE i.id = d.id)`)
	inflight := s.query("SELECT count(*) FROM soak_inflight")
	passes := s.query("SELECT count(*) FROM test_passes")
	statsDone := s.query("SELECT coalesce(sum(done), 0)::bigint FROM pepsi.dispatch_stats")
	statsFailed := s.query("SELECT coalesce(sum(failed), 0)::bigint FROM pepsi.dispatch_stats")
	timeouts := s.query("SELECT coalesce(sum(timeouts), 0) FROM pepsi.stage_stats")
	crashes := s.query("SELECT coalesce(sum(crashes), 0) FROM pepsi.stage_stats")
	workers := s.query("SELECT count(*) FROM test_workers")

	left := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(left, "pepsi soak: %d messages × 3 stages (PARALLELISM %d, QUEUE_LIMIT %d per stage), %d faults scheduled\n\n",
		n, *parallelism, *queueLimit, *faultsFlag)
	fmt.Fprintf(left, "fault\tinjected\n")
	for _, k := range kinds {
		fmt.Fprintf(left, "%s\t%d\n", k, s.injected[k])
	}
	for _, f := range payloadFaults {
		fmt.Fprintf(left, "%s\t%d messages\n", f.kind, s.injected[f.kind])
	}
	fmt.Fprintf(left, "(seen by the dispatchers: timeouts\t%d, crashes %d, workers started %d, left running by killed dispatchers %d)\n",
		timeouts, crashes, workers, s.orphans)
	fmt.Fprintf(left, "\nmessages\t\n")
	fmt.Fprintf(left, "done\t%d\n", done)
	fmt.Fprintf(left, "failed\t%d (%d without a reason)\n", failed, unexplained)
	fmt.Fprintf(left, "lost (not done or failed)\t%d (%d running, %d without a state row)\n", lost, running, noState)
	fmt.Fprintf(left, "duplicated (a stage passed twice)\t%d (%d not in flight at a fault; %d were in flight at one)\n", dupMsgs, dupOutside, inflight)
	fmt.Fprintf(left, "stage passes\t%d\n", passes)
	fmt.Fprintf(left, "dispatch_stats done / failed\t%d / %d (rows ahead by %d / %d: unflushed counts of killed dispatchers)\n",
		statsDone, statsFailed, done-statsDone, failed-statsFailed)
	fmt.Fprintf(left, "wall time\t%s (%.0f messages/s, %.0f stage passes/s)\n", wall.Round(time.Second),
		float64(done+failed)/wall.Seconds(), float64(passes)/wall.Seconds())
	left.Flush()
	if len(s.notes) > 0 {
		fmt.Println("\nnotes:")
		for _, m := range s.notes {
			fmt.Println("  " + m)
		}
	}
	if failed > 0 {
		s.failureSummary()
	}
	if lost > 0 || unexplained > 0 || dupOutside > 0 || noState > 0 || stalled {
		return 1, nil
	}
	return 0, nil
}

// failureSummary prints the failure reasons by kind.
func (s *soak) failureSummary() {
	rows, err := s.conn.Query(s.ctx, `SELECT regexp_replace(coalesce(dispatch_error, error), '[0-9]+', 'N', 'g') AS r, count(*)
		FROM pepsi.state WHERE status = 'failed' GROUP BY r ORDER BY count(*) DESC LIMIT 10`)
	if err != nil {
		return
	}
	fmt.Println("\nfailure reasons:")
	out := bufio.NewWriter(os.Stdout)
	var reason string
	var count int64
	_, _ = pgx.ForEachRow(rows, []any{&reason, &count}, func() error {
		fmt.Fprintf(out, "  %7s  %s\n", strconv.FormatInt(count, 10), reason)
		return nil
	})
	out.Flush()
}
