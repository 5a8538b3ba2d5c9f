package peers

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The real-work step (issue 34): N messages (jobs) pass 3 stages; each
// pass is one transaction that holds UPDATE acct SET n = n + 1 WHERE id =
// id % 10000 + 1 and the move to the next stage. Every system runs on a
// fresh database with the 10 000-row table acct, dropped afterwards.

//go:embed stage.py
var stagePy []byte

//go:embed kitstage.py
var kitStagePy []byte

//go:embed kitstage.js
var kitStageJS []byte

// workOptions configure the real-work step.
type workOptions struct {
	Messages       int
	Database       string
	RiverWorkers   int
	RiverMaxConns  int
	Python         string // a python3 with psycopg2; "" skips the Python stage
	KitPython      string // the python of a virtualenv with pepsi-stage (contrib/python); "" skips its stage
	KitSource      string // contrib/python: the package the run installs into that virtualenv
	NodeKit        string // the directory where @pepsi/stage is installed; "" skips its stage
	NodeKitSource  string // contrib/node: the package the run installs there
	PgbenchSeconds int
	Systems        []string // --work-systems; nil: all
	// RiverFetchCooldown is River's FetchCooldown in the chain; it also
	// spaces the NOTIFY that InsertTx sends (one per queue per cooldown),
	// whose lock serializes the commits that carry one.
	RiverFetchCooldown time.Duration
	// RiverVacuum is how often a VACUUM ANALYZE river_job runs beside
	// River's chain on a connection of its own (0: never), standing in for
	// autovacuum, which the test server has off: without statistics and
	// with its dead rows, River's completer (JobSetStateIfRunningMany)
	// slowed to ~130 jobs/s within 20 000 chains.
	RiverVacuum time.Duration
	Timeout     time.Duration
}

// pepsiWork is one pepsi configuration of the real work.
type pepsiWork struct {
	label       string
	kind        string // worker, worker-onetrip, plain, plain-onetrip, python, python-onetrip, python-kit or node-kit
	parallelism int
	queueLimit  int
	maxMessages int
}

// workResult is one system's run.
type workResult struct {
	passes  int
	elapsed time.Duration
	cost    passCost // from the end of the warm-up to the last message done
	// versions is the row versions written into pepsi.state per pass
	// (warm-up included), less each message's first; 0: unknown.
	versions float64
}

func (r workResult) rate() float64 { return float64(r.passes) / r.elapsed.Seconds() }

// runPepsiWork runs one configuration on a fresh database: pepsi migrate,
// acct, a pepsi.conf of three stages a → b → c whose PROGRAM is this
// binary's stage (or stage.py), pepsi dispatch; a warm-up batch, a
// CHECKPOINT, then N messages by COPY; the figure is 3N over the time
// from their creation to the last one's done, by the server's clock.
func runPepsiWork(ctx context.Context, exe, self, dir, serverDSN string, o workOptions, w pepsiWork, progress func(string, ...any)) (res workResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := recreateDatabase(ctx, serverDSN, o.Database); err != nil {
		return res, fmt.Errorf("create database %s: %w", o.Database, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if derr := dropDatabase(dctx, serverDSN, o.Database); derr != nil && err == nil {
			err = fmt.Errorf("drop database %s: %w", o.Database, derr)
		}
	}()
	dsn, err := withDatabase(serverDSN, o.Database)
	if err != nil {
		return res, err
	}
	env := append(os.Environ(), "PEPSI_DSN="+dsn, "PEPSI_CONFIG=")
	mig := exec.CommandContext(ctx, exe, "migrate")
	mig.Env = env
	if out, err := mig.CombinedOutput(); err != nil {
		return res, fmt.Errorf("pepsi migrate: %v: %s", err, out)
	}
	db, err := queue.Open(ctx, dsn, queue.Options{App: "pepsi bench peers", MaxConns: 2})
	if err != nil {
		return res, err
	}
	defer db.Close()
	sql, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer sql.Close(context.Background())
	if _, err := sql.Exec(ctx, `CREATE TABLE acct (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`); err != nil {
		return res, err
	}
	if _, err := sql.Exec(ctx, `INSERT INTO acct (id) SELECT generate_series(1, $1::int)`, acctRows); err != nil {
		return res, err
	}
	if _, err := sql.Exec(ctx, `VACUUM ANALYZE acct`); err != nil {
		return res, err
	}

	// The configuration.
	stages := []string{"a", "b", "c"}
	var c strings.Builder
	fmt.Fprintf(&c, "; written by pepsi bench peers: %s\n[pepsi-dispatch]\n", w.label)
	for i, s := range stages {
		var prog string
		switch w.kind {
		case "node-kit":
			js := filepath.Join(o.NodeKit, "kitstage.js")
			if err := os.WriteFile(js, kitStageJS, 0o644); err != nil {
				return res, err
			}
			prog = "node " + shellQuote(js)
		case "python-kit":
			py := filepath.Join(dir, "kitstage.py")
			if err := os.WriteFile(py, kitStagePy, 0o644); err != nil {
				return res, err
			}
			prog = shellQuote(o.KitPython) + " " + shellQuote(py)
		case "python", "python-onetrip":
			py := filepath.Join(dir, "stage.py")
			if err := os.WriteFile(py, stagePy, 0o755); err != nil {
				return res, err
			}
			prog = shellQuote(o.Python) + " " + shellQuote(py)
			if w.kind == "python-onetrip" {
				prog += " --one-trip"
			}
		default:
			prog = shellQuote(self) + " stage --kind " + w.kind
		}
		if i+1 < len(stages) {
			prog += " --next " + stages[i+1]
		}
		fmt.Fprintf(&c, "\n[stage-%s]\nPROGRAM = %s\nPARALLELISM = %d\nQUEUE_LIMIT = %d\nMAX_MESSAGES = %d\n",
			s, prog, w.parallelism, w.queueLimit, w.maxMessages)
	}
	conf := filepath.Join(dir, "realwork.conf")
	if err := os.WriteFile(conf, []byte(c.String()), 0o644); err != nil {
		return res, err
	}
	logPath := filepath.Join(dir, "realwork-"+w.kind+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return res, err
	}
	defer logf.Close()
	d := exec.Command(exe, "dispatch", "-c", conf)
	d.Env = append(os.Environ(), "PEPSI_DSN="+dsn, "PEPSI_CONFIG="+conf)
	d.Stdout, d.Stderr = logf, logf
	if err := d.Start(); err != nil {
		return res, err
	}
	done := make(chan struct{})
	go func() { _ = d.Wait(); close(done) }()
	defer func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = d.Process.Kill()
			<-done
		}
	}()
	logTail := func() string { b, _ := os.ReadFile(logPath); return tailLines(b, 20) }
	for t0 := time.Now(); ; {
		if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("dispatcher started")) {
			break
		}
		select {
		case <-done:
			return res, fmt.Errorf("pepsi dispatch exited at start:\n%s", logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(t0) > time.Minute {
			return res, fmt.Errorf("pepsi dispatch did not start within a minute:\n%s", logTail())
		}
	}
	enqueue := func(n int) (int64, error) {
		payloads := make([][]byte, n)
		for i := range payloads {
			payloads[i] = []byte("work")
		}
		ids, err := db.EnqueueBulk(ctx, queue.Bulk{Stage: stages[0], Payloads: payloads})
		if err != nil {
			return 0, err
		}
		return ids[0], nil
	}
	waitDone := func(first int64) error {
		pause := 20 * time.Millisecond
		for {
			// Cheap enough to poll beside the measured run: one probe of
			// state_live's primary key, and the failed rows (none, or the
			// run ends).
			var live bool
			var failed int64
			var example string
			if err := sql.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pepsi.state_live WHERE id >= $1), count(*),
				coalesce(min(stage || ': ' || coalesce(dispatch_error, error, '')), '')
				FROM pepsi.state WHERE status = 'failed' AND id >= $1`, first).Scan(&live, &failed, &example); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d messages failed, e.g. at %s:\n%s", failed, example, logTail())
			}
			if !live {
				return nil
			}
			select {
			case <-done:
				return fmt.Errorf("pepsi dispatch exited:\n%s", logTail())
			case <-ctx.Done():
				return fmt.Errorf("messages from %d on not done: %w", first, ctx.Err())
			case <-time.After(pause):
			}
			pause = min(2*pause, 200*time.Millisecond)
		}
	}
	// Warm-up: every worker started and connected.
	first, err := enqueue(3 * w.parallelism * w.queueLimit)
	if err != nil {
		return res, err
	}
	if err := waitDone(first); err != nil {
		return res, err
	}
	if _, err := sql.Exec(ctx, "CHECKPOINT"); err != nil {
		return res, err
	}
	mark, err := markCost(ctx, sql, dsn, d.Process.Pid)
	if err != nil {
		return res, err
	}
	progress("realwork: %s: %d messages", w.label, o.Messages)
	if first, err = enqueue(o.Messages); err != nil {
		return res, err
	}
	if err := waitDone(first); err != nil {
		return res, err
	}
	if res.cost, err = mark.since(ctx, sql, d.Process.Pid); err != nil {
		return res, err
	}
	var secs, rows float64
	if err := sql.QueryRow(ctx, `SELECT extract(epoch FROM max(s.updated_at) - min(m.created_at))::float8, count(*)
		FROM pepsi.state s JOIN pepsi.message m ON m.id = s.id WHERE s.id >= $1`, first).Scan(&secs, &rows); err != nil {
		return res, err
	}
	if int(rows) != o.Messages {
		return res, fmt.Errorf("%v messages from id %d, want %d", rows, first, o.Messages)
	}
	var sum int64
	if err := sql.QueryRow(ctx, "SELECT sum(n) FROM acct").Scan(&sum); err != nil {
		return res, err
	}
	if want := int64(3 * (o.Messages + 3*w.parallelism*w.queueLimit)); sum != want {
		return res, fmt.Errorf("acct: sum(n) = %d, want %d (3 passes a message)", sum, want)
	}
	res.passes = 3 * o.Messages
	res.elapsed = time.Duration(secs * float64(time.Second))
	// The statistics of the row versions are whole once the backends that
	// wrote them have ended: the dispatcher's and its stages'.
	_ = d.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		msgs := int64(o.Messages + 3*w.parallelism*w.queueLimit)
		if n, err := rowVersions(ctx, sql); err == nil && n > msgs {
			res.versions = float64(n-msgs) / float64(3*msgs)
		}
	case <-time.After(time.Minute):
	}
	return res, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func tailLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// The River chain: three job kinds; kind i's Work runs the UPDATE, inserts
// the job of kind i+1 (InsertTx) and completes itself (JobCompleteTx), all
// in one transaction.

type chainArgs1 struct {
	Num int64 `json:"num"`
}
type chainArgs2 chainArgs1
type chainArgs3 chainArgs1

func (chainArgs1) Kind() string { return "work1" }
func (chainArgs2) Kind() string { return "work2" }
func (chainArgs3) Kind() string { return "work3" }
func (a chainArgs1) num() int64 { return a.Num }
func (a chainArgs2) num() int64 { return a.Num }
func (a chainArgs3) num() int64 { return a.Num }

type chainArgs interface {
	river.JobArgs
	num() int64
}

type chainWorker[A chainArgs] struct {
	river.WorkerDefaults[A]
	pool *pgxpool.Pool
	next func(num int64) river.JobArgs // nil: the last kind
}

func (w *chainWorker[A]) Work(ctx context.Context, job *river.Job[A]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	num := job.Args.num()
	if _, err := tx.Exec(ctx, acctSQL, acctID(num)); err != nil {
		return err
	}
	if w.next != nil {
		if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, w.next(num), nil); err != nil {
			return err
		}
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// runRiverWork runs the chain once on a fresh database: the client
// started and warmed up (a few chains through), a CHECKPOINT, then N jobs
// of the first kind inserted in one InsertManyFast (COPY) while it runs;
// the figure is 3N over the time from just before the insert to the last
// third-kind job's finalized_at, both by the server's clock.
func runRiverWork(ctx context.Context, serverDSN, database string, o workOptions, ro riverOptions, progress func(string, ...any)) (res workResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	pool, drop, err := riverDatabase(ctx, serverDSN, database, o.RiverMaxConns)
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()
	driver := riverpgxv5.New(pool)
	for _, q := range []string{`CREATE TABLE acct (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO acct (id) SELECT generate_series(1, 10000)`, `VACUUM ANALYZE acct`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return res, err
		}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &chainWorker[chainArgs1]{pool: pool, next: func(n int64) river.JobArgs { return chainArgs2{Num: n} }})
	river.AddWorker(workers, &chainWorker[chainArgs2]{pool: pool, next: func(n int64) river.JobArgs { return chainArgs3{Num: n} }})
	river.AddWorker(workers, &chainWorker[chainArgs3]{pool: pool})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     o.RiverFetchCooldown,
		FetchPollInterval: max(ro.FetchPollInterval, o.RiverFetchCooldown),
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.RiverWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return res, err
	}
	if err := client.Start(ctx); err != nil {
		return res, fmt.Errorf("river start: %w", err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if serr := client.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("river stop: %w", serr)
		}
	}()
	insert := func(from, n int) error {
		batch := make([]river.InsertManyParams, n)
		for i := range batch {
			batch[i] = river.InsertManyParams{Args: chainArgs1{Num: int64(from + i)}}
		}
		_, err := client.InsertManyFast(ctx, batch)
		return err
	}
	waitDone := func(want int) error {
		pause := 20 * time.Millisecond
		for {
			var completed, bad int
			if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = 'work3' AND state = 'completed'),
				count(*) FILTER (WHERE state IN ('discarded', 'cancelled', 'retryable'))
				FROM river_job`).Scan(&completed, &bad); err != nil {
				return err
			}
			if bad > 0 {
				return fmt.Errorf("river: %d jobs discarded, cancelled or to be retried", bad)
			}
			if completed >= want {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("river: %d of %d chains done: %w", completed, want, ctx.Err())
			case <-time.After(pause):
			}
			pause = min(2*pause, 200*time.Millisecond)
		}
	}
	if o.RiverVacuum > 0 {
		vconn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err != nil {
			return res, err
		}
		vctx, vstop := context.WithCancel(ctx)
		vdone := make(chan struct{})
		go func() {
			defer close(vdone)
			defer vconn.Close(context.Background())
			tick := time.NewTicker(o.RiverVacuum)
			defer tick.Stop()
			for {
				select {
				case <-vctx.Done():
					return
				case <-tick.C:
				}
				if _, err := vconn.Exec(vctx, "VACUUM ANALYZE river_job"); err != nil && vctx.Err() == nil {
					progress("realwork: River: VACUUM ANALYZE river_job: %v", err)
				}
			}
		}()
		defer func() { vstop(); <-vdone }()
	}
	warm := 3 * o.RiverWorkers
	if err := insert(1, warm); err != nil {
		return res, fmt.Errorf("river insert: %w", err)
	}
	if err := waitDone(warm); err != nil {
		return res, err
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return res, err
	}
	progress("realwork: River chain: %d jobs of kind work1 (MaxWorkers %d, pool %d)", o.Messages, o.RiverWorkers, o.RiverMaxConns)
	var start time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&start); err != nil {
		return res, err
	}
	if err := insert(warm+1, o.Messages); err != nil {
		return res, fmt.Errorf("river insert: %w", err)
	}
	if err := waitDone(warm + o.Messages); err != nil {
		return res, err
	}
	var last time.Time
	if err := pool.QueryRow(ctx, "SELECT max(finalized_at) FROM river_job WHERE kind = 'work3'").Scan(&last); err != nil {
		return res, err
	}
	var sum int64
	if err := pool.QueryRow(ctx, "SELECT sum(n) FROM acct").Scan(&sum); err != nil {
		return res, err
	}
	if want := int64(3 * (o.Messages + warm)); sum != want {
		return res, fmt.Errorf("river: acct sum(n) = %d, want %d", sum, want)
	}
	res.passes = 3 * o.Messages
	res.elapsed = last.Sub(start)
	return res, nil
}

// pgbenchScript is the same transaction shape without a queue: BEGIN,
// UPDATE of the application's row, UPDATE of a queue-like row, COMMIT.
const pgbenchScript = `\set id random(1, 20000)
\set aid :id % 10000 + 1
BEGIN;
UPDATE acct SET n = n + 1 WHERE id = :aid;
UPDATE q SET stage = stage + 1, updated_at = now() WHERE id = :id;
COMMIT;
`

// pgbenchReadScript is the same with the read of a pkg/worker stage in
// its default mode: the queue row and the message's row, before the work.
const pgbenchReadScript = `\set id random(1, 20000)
\set aid :id % 10000 + 1
BEGIN;
SELECT q.stage, m.created_at, m.headers, m.payload FROM q JOIN msg m ON m.id = q.id WHERE q.id = :id;
UPDATE acct SET n = n + 1 WHERE id = :aid;
UPDATE q SET stage = stage + 1, updated_at = now() WHERE id = :id;
COMMIT;
`

var tpsRE = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// runPgbench measures the ceiling at each client count on a fresh
// database and returns transactions per second, in order: of
// pgbenchScript, then of pgbenchReadScript.
func runPgbench(ctx context.Context, serverDSN, database, dir string, o workOptions, clients []int) (tps, tpsRead []float64, err error) {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		return nil, nil, errors.New("no pgbench on PATH")
	}
	if err := recreateDatabase(ctx, serverDSN, database); err != nil {
		return nil, nil, err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		if derr := dropDatabase(dctx, serverDSN, database); derr != nil && err == nil {
			err = derr
		}
	}()
	dsn, err := withDatabase(serverDSN, database)
	if err != nil {
		return nil, nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.Background())
	for _, q := range []string{`CREATE TABLE acct (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO acct (id) SELECT generate_series(1, 10000)`,
		`CREATE TABLE q (id bigint PRIMARY KEY, stage int NOT NULL DEFAULT 0, updated_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO q (id) SELECT generate_series(1, 20000)`,
		`CREATE TABLE msg (id bigint PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), headers jsonb NOT NULL DEFAULT '{}', payload bytea NOT NULL)`,
		`INSERT INTO msg (id, payload) SELECT generate_series(1, 20000), 'work'`,
		`VACUUM ANALYZE acct`, `VACUUM ANALYZE q`, `VACUUM ANALYZE msg`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, nil, err
		}
	}
	for i, text := range []string{pgbenchScript, pgbenchReadScript} {
		script := filepath.Join(dir, fmt.Sprintf("pgbench%d.sql", i))
		if err := os.WriteFile(script, []byte(text), 0o644); err != nil {
			return nil, nil, err
		}
		for _, c := range clients {
			if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
				return nil, nil, err
			}
			cmd := exec.CommandContext(ctx, pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(c), "-j", strconv.Itoa(min(c, 2)),
				"-T", strconv.Itoa(o.PgbenchSeconds), "-f", script, dsn)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return nil, nil, fmt.Errorf("pgbench: %v:\n%s", err, out)
			}
			m := tpsRE.FindSubmatch(out)
			if m == nil {
				return nil, nil, fmt.Errorf("pgbench: no tps in its output:\n%s", out)
			}
			v, _ := strconv.ParseFloat(string(m[1]), 64)
			if i == 0 {
				tps = append(tps, v)
			} else {
				tpsRead = append(tpsRead, v)
			}
		}
	}
	return tps, tpsRead, nil
}

// findPython returns a python3 that imports psycopg2, or "".
func findPython(given string) string {
	cands := []string{given}
	if given == "" {
		cands = []string{"/usr/bin/python3", "python3"}
	}
	for _, c := range cands {
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if exec.Command(p, "-c", "import psycopg2").Run() == nil {
			return p
		}
	}
	return ""
}

// kitNode installs the package @pepsi/stage from src (contrib/node) with
// its dependency pg from the npm registry into a directory under dir and
// returns that directory; "" with why when it cannot.
func kitNode(dir, src string) (string, string) {
	if src == "" {
		return "", "no --node-kit"
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", err.Error()
	}
	if _, err := os.Stat(filepath.Join(abs, "package.json")); err != nil {
		return "", err.Error()
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", "no node on PATH"
	}
	kit := filepath.Join(dir, "node-kit")
	if err := os.MkdirAll(kit, 0o755); err != nil {
		return "", err.Error()
	}
	if err := os.WriteFile(filepath.Join(kit, "package.json"), []byte(`{"name": "pepsi-bench-kit", "private": true}`+"\n"), 0o644); err != nil {
		return "", err.Error()
	}
	for _, args := range [][]string{
		{"npm", "install", "--silent", "--no-audit", "--no-fund", "--install-links", abs},
		{"node", "-e", `require("@pepsi/stage"); require("pg")`},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = kit
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Sprintf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return kit, ""
}

// kitPython makes a virtualenv under dir that sees the distribution's
// psycopg2 and installs the package pepsi-stage from src (contrib/python)
// into it, without PyPI, and returns its python; "" with why when it
// cannot.
func kitPython(dir, src string) (string, string) {
	if src == "" {
		return "", "no --python-kit"
	}
	if _, err := os.Stat(filepath.Join(src, "pyproject.toml")); err != nil {
		return "", err.Error()
	}
	venv := filepath.Join(dir, "kit-venv")
	py := filepath.Join(venv, "bin", "python")
	for _, args := range [][]string{
		{"/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip", venv},
		{py, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-index", src},
		{py, "-c", "import pepsi_stage, psycopg2"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Sprintf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return py, ""
}
