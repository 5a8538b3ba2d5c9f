package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/dispatch"
	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestDispatcherMetrics runs a real dispatcher in this process with the
// metrics as its observer and their server on a free port, runs a pipeline
// through it, and checks over HTTP, with the Prometheus text parser, that
// the metrics say what the pipeline did and agree with the statistics
// tables; /healthz is 503 before the dispatcher runs and after it stops,
// 200 while it runs, and again after its listener was cut and reconnected.
func TestDispatcherMetrics(t *testing.T) {
	site := testkit.NewSite(t, fmt.Sprintf(`[pepsi-dispatch]
MAX_RUNTIME = 1
SPAWN_COOLDOWN = 200ms
RECONNECT_MIN = 100ms
RECONNECT_MAX = 500ms

[stage-work]
PROGRAM = %[1]s
PARALLELISM = 2
QUEUE_LIMIT = 4

[stage-faults]
PROGRAM = %[1]s
PARALLELISM = 1
QUEUE_LIMIT = 1

[stage-broken]
PROGRAM = /nonexistent/stage
`, testkit.Worker(t)))
	site.WorkerTables()
	db, dsn := site.DB, site.DSN
	cfg, err := config.Load(site.Path)
	if err != nil {
		t.Fatal(err)
	}

	// 20 messages that finish, one of them left running as if by a dead
	// dispatcher (an orphan); one pass per way a pass can end, and one
	// that reports a fused stage nobody configured; one for a stage whose
	// program cannot start.
	payloads := make([][]byte, 20)
	payloads[1] = []byte("work=stderr:1x10000") // a stderr line cut to 4 KiB
	work, err := db.EnqueueBulk(ctx(t), queue.Bulk{Stage: "work", Payloads: payloads})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx(t), "UPDATE pepsi.state SET status = 'running' WHERE id = $1", work[0]); err != nil {
		t.Fatal(err)
	}
	faults := [][]byte{[]byte("faults=exit:1"), []byte("faults=hang"), []byte("faults=crash"), []byte("faults=garbage"), []byte("faults=fused:ghost")}
	if _, err := db.EnqueueBulk(ctx(t), queue.Bulk{Stage: "faults", Payloads: faults}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EnqueueBulk(ctx(t), queue.Bulk{Stage: "broken", Payloads: [][]byte{nil}}); err != nil {
		t.Fatal(err)
	}

	logs := site.Logs
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src := NewSource(dsn, "pepsi dispatch metrics")
	defer src.Close()
	m := NewObserver(ObserverOptions{Stages: cfg.StageNames(), Source: src, MaxAge: -1, Version: "test", Log: log})
	srv := NewServer(m.Handler(), log)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	base := "http://" + srv.Addr()

	// Before the dispatcher runs: unhealthy, every configured stage's
	// series at zero, the queue counted.
	if code, body := testkit.Get(t, base+"/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz before start: %d %q, want 503", code, body)
	}
	f := scrape(t, base)
	for _, want := range []struct {
		name   string
		labels []string
		v      float64
	}{
		{"pepsi_dispatch_total", []string{"stage", "work"}, 0},
		{"pepsi_stage_results_total", []string{"stage", "broken", "result", "protocol"}, 0},
		{"pepsi_worker_start_failures_total", []string{"stage", "broken"}, 0},
		{"pepsi_workers", []string{"stage", "faults"}, 0},
		{"pepsi_worker_stderr_dropped_lines_total", []string{"stage", "work"}, 0},
		{"pepsi_worker_stderr_cut_bytes_total", []string{"stage", "faults"}, 0},
		{"pepsi_listener_reconnects_total", []string{"reason", "network"}, 0},
		{"pepsi_listener_reconnects_total", []string{"reason", "server_shutdown"}, 0},
		{"pepsi_queue_retries_total", []string{"reason", "read_only"}, 0},
		{"pepsi_queue_retries_total", []string{"reason", "closed"}, 0},
		{"pepsi_orphans_rescued_total", nil, 0},
		{"pepsi_dispatcher_healthy", nil, 0},
		{"pepsi_build_info", []string{"version", "test"}, 1},
		{"pepsi_queue_depth", []string{"stage", "work", "status", "pending"}, 19},
		{"pepsi_queue_depth", []string{"stage", "work", "status", "running"}, 1},
		{"pepsi_queue_depth", []string{"stage", "faults", "status", "pending"}, 5},
		{"pepsi_queue_depth", []string{"stage", "broken", "status", "done"}, 0},
	} {
		if got := f.value(want.name, want.labels...); got != want.v {
			t.Errorf("before start: %s%v = %v, want %v", want.name, want.labels, got, want.v)
		}
	}
	if age := f.value("pepsi_queue_oldest_pending_age_seconds", "stage", "work"); age < 0 {
		t.Errorf("pepsi_queue_oldest_pending_age_seconds{work} = %v", age)
	}

	d, err := dispatch.New(dispatch.Options{Config: cfg, Log: log, Observe: m})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	stopped := false
	stop := func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dispatcher: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("dispatcher did not stop; logs:\n%s", logs)
		}
	}
	defer stop()

	site.WaitFor("the pipeline to settle", time.Minute, func() bool {
		return site.Int64("SELECT count(*) FROM pepsi.state WHERE stage = 'work' AND status = 'done'") == 20 &&
			site.Int64("SELECT count(*) FROM pepsi.state WHERE stage = 'faults' AND status IN ('done', 'failed')") == 5
	})
	// A stage commits before it answers: wait for the answers too, the
	// fused stage's among them.
	site.WaitFor("no message in flight and every answer read", time.Minute, func() bool {
		f = scrape(t, base)
		answered := 0.0
		for _, r := range []string{"ok", "failed", "timeout", "crash", "protocol"} {
			answered += max(f.value("pepsi_stage_results_total", "stage", "faults", "result", r), 0)
		}
		return f.value("pepsi_inflight", "stage", "work") == 0 && f.value("pepsi_inflight", "stage", "faults") == 0 &&
			f.value("pepsi_worker_start_failures_total", "stage", "broken") >= 1 &&
			answered == 5 && f.value("pepsi_stage_results_total", "stage", "ghost", "result", "ok") == 1 &&
			// A pass's result and busy time are two counters: a scrape
			// between them sees one.
			f.value("pepsi_stage_busy_seconds_total", "stage", "ghost") >= 0.25 &&
			f.value("pepsi_worker_stderr_cut_bytes_total", "stage", "work") == 10000-4096
	})
	if code, body := testkit.Get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz while running: %d %q, want 200", code, body)
	}
	for _, want := range []struct {
		name   string
		labels []string
		v      float64
	}{
		{"pepsi_dispatch_total", []string{"stage", "work"}, 20},
		{"pepsi_dispatch_total", []string{"stage", "faults"}, 5},
		{"pepsi_dispatch_total", []string{"stage", "broken"}, 0},
		{"pepsi_stage_results_total", []string{"stage", "work", "result", "ok"}, 20},
		{"pepsi_stage_results_total", []string{"stage", "work", "result", "failed"}, 0},
		{"pepsi_worker_stderr_dropped_lines_total", []string{"stage", "work"}, 0},
		{"pepsi_stage_results_total", []string{"stage", "faults", "result", "ok"}, 1},
		{"pepsi_stage_results_total", []string{"stage", "faults", "result", "failed"}, 1},
		{"pepsi_stage_results_total", []string{"stage", "faults", "result", "timeout"}, 1},
		{"pepsi_stage_results_total", []string{"stage", "faults", "result", "crash"}, 1},
		{"pepsi_stage_results_total", []string{"stage", "faults", "result", "protocol"}, 1},
		{"pepsi_stage_results_total", []string{"stage", "ghost", "result", "ok"}, 1},
		{"pepsi_stage_busy_seconds_total", []string{"stage", "ghost"}, 0.25},
		{"pepsi_orphans_rescued_total", nil, 1},
		{"pepsi_dispatcher_healthy", nil, 1},
		{"pepsi_queue_depth", []string{"stage", "work", "status", "done"}, 20},
		{"pepsi_queue_depth", []string{"stage", "work", "status", "pending"}, 0},
		{"pepsi_queue_depth", []string{"stage", "faults", "status", "failed"}, 4},
		{"pepsi_queue_depth", []string{"stage", "faults", "status", "done"}, 1},
		{"pepsi_queue_count_failures_total", nil, 0},
	} {
		if got := f.value(want.name, want.labels...); got != want.v {
			t.Errorf("%s%v = %v, want %v", want.name, want.labels, got, want.v)
		}
	}
	if h := f.find("pepsi_dispatch_latency_seconds", "stage", "work"); h.GetHistogram().GetSampleCount() != 20 || h.GetHistogram().GetSampleSum() < 0 {
		t.Errorf("pepsi_dispatch_latency_seconds{work}: %v", h)
	}
	if n := f.value("pepsi_worker_starts_total", "stage", "work"); n < 1 || n > 20 {
		t.Errorf("pepsi_worker_starts_total{work} = %v", n)
	}
	// exit:1 and hang on the first worker (killed), crash on the second,
	// garbage on the third (stopped), the fused pass on the fourth.
	if n := f.value("pepsi_worker_starts_total", "stage", "faults"); n != 4 {
		t.Errorf("pepsi_worker_starts_total{faults} = %v, want 4", n)
	}
	if n := f.value("pepsi_worker_starts_total", "stage", "broken"); n != 0 {
		t.Errorf("pepsi_worker_starts_total{broken} = %v, want 0", n)
	}
	if busy := f.value("pepsi_stage_busy_seconds_total", "stage", "faults"); busy < 1 {
		t.Errorf("pepsi_stage_busy_seconds_total{faults} = %v, want at least MAX_RUNTIME (the hang)", busy)
	}
	if f["go_goroutines"] == nil || f["process_open_fds"] == nil {
		t.Errorf("no Go or process metrics: %s", f.names())
	}

	// Cut the listener: the dispatcher reconnects, counts it, and is
	// healthy again.
	if _, err := db.Pool.Exec(ctx(t), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'pepsi dispatch pid %'`); err != nil {
		t.Fatal(err)
	}
	// Two waits, not one: a scrape is not atomic, and one that read the
	// health gauge before the failure and the counter after it would see
	// both "reconnected" and "healthy" while the dispatcher is not. The
	// dispatcher marks itself unhealthy before it counts the reconnect, so
	// health seen after the count is health regained.
	site.WaitFor("a reconnect counted", time.Minute, func() bool {
		return scrape(t, base).sum("pepsi_listener_reconnects_total") >= 1
	})
	site.WaitFor("healthy again", time.Minute, func() bool {
		f = scrape(t, base)
		return f.value("pepsi_dispatcher_healthy") == 1
	})
	if code, _ := testkit.Get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after the reconnect: %d, want 200", code)
	}
	for _, name := range []string{"pepsi_listener_reconnects_total", "pepsi_queue_retries_total"} {
		for _, m := range f[name].GetMetric() {
			if r := labelsOf(m)["reason"]; r == "" || strings.ContainsAny(r, " :") || len(labelsOf(m)) != 1 {
				t.Errorf("%s labels %v", name, labelsOf(m))
			}
		}
	}
	// A listener reconnect is not a queue retry.
	if n := f.sum("pepsi_queue_retries_total"); n != 0 {
		t.Errorf("pepsi_queue_retries_total = %v after a listener reconnect, want 0", n)
	}
	reconnects := f.sum("pepsi_listener_reconnects_total")

	// A claim that fails is retried after a backoff and counted as a
	// retry, not as a reconnect; work after both is counted too.
	ddl(t, db, `
		CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'test: refused'; END$$;
		CREATE TRIGGER test_refuse BEFORE UPDATE ON pepsi.state FOR EACH ROW EXECUTE FUNCTION test_refuse()`)
	if _, err := db.EnqueueBulk(ctx(t), queue.Bulk{Stage: "work", Payloads: make([][]byte, 3)}); err != nil {
		t.Fatal(err)
	}
	site.WaitFor("a queue retry", time.Minute, func() bool {
		f = scrape(t, base)
		return f.value("pepsi_queue_retries_total", "reason", "error_P0001") >= 1
	})
	ddl(t, db, "DROP TRIGGER test_refuse ON pepsi.state")
	site.WaitFor("23 messages handed", time.Minute, func() bool {
		f = scrape(t, base)
		return f.value("pepsi_stage_results_total", "stage", "work", "result", "ok") == 23
	})
	if n := f.sum("pepsi_listener_reconnects_total"); n != reconnects {
		t.Errorf("pepsi_listener_reconnects_total = %v after a queue retry, want %v as before", n, reconnects)
	}

	stop()
	site.Check()
	if code, body := testkit.Get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "unhealthy: ") {
		t.Errorf("/healthz after stop: %d %q, want 503", code, body)
	}
	f = scrape(t, base)
	if v := f.value("pepsi_dispatcher_healthy"); v != 0 {
		t.Errorf("pepsi_dispatcher_healthy after stop = %v", v)
	}

	// The statistics the dispatcher wrote agree with the metrics.
	stages, global, err := db.ReadStats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	row := map[string]queue.StageStats{}
	for _, s := range stages {
		row[s.Stage] = s
	}
	res := func(stage, result string) int64 {
		return int64(f.value("pepsi_stage_results_total", "stage", stage, "result", result))
	}
	for _, st := range []string{"work", "faults", "ghost"} {
		r := row[st]
		if r.Processed != res(st, "ok") || r.Failed != res(st, "failed")+res(st, "protocol") ||
			r.Timeouts != res(st, "timeout") || r.Crashes != res(st, "crash") {
			t.Errorf("stage_stats %s = %+v; metrics: ok %d failed %d protocol %d timeout %d crash %d", st, r,
				res(st, "ok"), res(st, "failed"), res(st, "protocol"), res(st, "timeout"), res(st, "crash"))
		}
	}
	// Busy time: the same durations, summed in another order. (The
	// metric also counts passes that timed out or crashed; work has none.)
	if got, want := f.value("pepsi_stage_busy_seconds_total", "stage", "work"), row["work"].BusySeconds; math.Abs(got-want) > 1e-6 {
		t.Errorf("pepsi_stage_busy_seconds_total{work} = %v, stage_stats.busy_seconds = %v", got, want)
	}
	if int64(f.value("pepsi_orphans_rescued_total")) != global.Orphans {
		t.Errorf("pepsi_orphans_rescued_total = %v, dispatch_stats.orphans = %d", f.value("pepsi_orphans_rescued_total"), global.Orphans)
	}
	if handed := int64(f.sum("pepsi_dispatch_total")); handed > global.Claimed {
		t.Errorf("handed %d > claimed %d", handed, global.Claimed)
	}
	if v := f.value("pepsi_queue_depth", "stage", "broken", "status", "pending"); v != 1 {
		t.Errorf("pepsi_queue_depth{broken,pending} after stop = %v, want 1", v)
	}
}

// TestDepthFailure: when the queue cannot be counted, the scrape still
// succeeds without the depth series, and the failure is counted and logged
// once.
func TestDepthFailure(t *testing.T) {
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	src := NewSource("postgres://nobody@127.0.0.1:1/nothing?connect_timeout=5", "test")
	defer src.Close()
	m := NewObserver(ObserverOptions{Stages: []string{"a"}, Source: src, MaxAge: -1, Log: log})
	srv := NewServer(m.Handler(), log)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	base := "http://" + srv.Addr()
	scrape(t, base)
	f := scrape(t, base)
	if f["pepsi_queue_depth"] != nil {
		t.Error("pepsi_queue_depth served without a count")
	}
	if v := f.value("pepsi_queue_count_failures_total"); v != 2 {
		t.Errorf("pepsi_queue_count_failures_total = %v, want 2", v)
	}
	if v := f.value("pepsi_dispatch_total", "stage", "a"); v != 0 {
		t.Errorf("pepsi_dispatch_total{a} = %v", v)
	}
	if n := strings.Count(logs.String(), "counting the queue failed"); n != 1 {
		t.Errorf("logged %d times:\n%s", n, logs)
	}
	m.Health(true)
	if code, _ := testkit.Get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d; health does not depend on the count", code)
	}
}

// TestServer: Start fails at once on an address in use, with the cause
// alone; Stop is idempotent; / is an index and other paths are 404.
func TestServer(t *testing.T) {
	a := NewServer(NewObserver(ObserverOptions{}).Handler(), nil)
	if err := a.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	b := NewServer(http.NotFoundHandler(), nil)
	err := b.Start(a.Addr())
	if err == nil || !strings.Contains(err.Error(), "address already in use") || strings.Contains(err.Error(), a.Addr()) {
		t.Errorf("second Start on %s: %v", a.Addr(), err)
	}
	base := "http://" + a.Addr()
	if code, body := testkit.Get(t, base+"/"); code != http.StatusOK || !strings.Contains(body, `href="metrics"`) {
		t.Errorf("/: %d %q", code, body)
	}
	if code, _ := testkit.Get(t, base+"/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d", code)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Error(err)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Error(err)
	}
	if _, err := http.Get(base + "/metrics"); err == nil {
		t.Error("still serving after Stop")
	}
}

// ddl runs sql, DDL on pepsi.state while a dispatcher runs, again while it
// deadlocks: it locks the partitioned table's parts in another order than
// the dispatcher's statements do, and the server breaks the tie either way.
func ddl(t *testing.T, db *pgtest.DB, sql string) {
	t.Helper()
	for try := 1; ; try++ {
		_, err := db.Pool.Exec(ctx(t), sql)
		if err == nil {
			return
		}
		if !pgerr.IsTransient(err) || try == 20 {
			t.Fatal(err)
		}
	}
}
