package metrics

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// descName reads a Desc's fully-qualified name (Desc has no accessor).
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// described names the pepsi_ and promhttp_ families a collector describes.
func described(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var out []string
	for d := range ch {
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		if strings.HasPrefix(m[1], "pepsi_") || strings.HasPrefix(m[1], "promhttp_") {
			out = append(out, m[1])
		}
	}
	return out
}

// seriesCount is how many series each family of a scrape has.
func seriesCount(f families) map[string]int {
	out := map[string]int{}
	for name, mf := range f {
		out[name] = len(mf.GetMetric())
	}
	return out
}

// TestFamiliesFromFirstScrape: every family whose label values are known
// in advance (the configured stages, the results, the statuses, the known
// reasons) exists, with every one of its series at zero, in the first
// scrape of both servers, before anything has happened: a dashboard or an
// alert on it sees 0, not "no data". Families whose labels come only with
// events (a stage no section configures, an "error_SQLSTATE" reason) are
// the only ones that may grow later.
func TestFamiliesFromFirstScrape(t *testing.T) {
	_, dsn := pgtest.New(t)
	stages := []string{"a", "b"}
	n := len(stages)
	statuses := len(queue.Statuses)

	// The dispatcher's.
	src := NewSource(dsn, pgtest.App)
	defer src.Close()
	obs := NewObserver(ObserverOptions{Stages: stages, Source: src, MaxAge: -1, Version: "test"})
	srv := NewServer(obs.Handler(), nil)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(ctx(t))
	got := seriesCount(scrape(t, "http://"+srv.Addr()))
	want := map[string]int{
		"pepsi_dispatch_total":                    n,
		"pepsi_dispatch_latency_seconds":          n,
		"pepsi_stage_results_total":               n * len(results),
		"pepsi_stage_busy_seconds_total":          n,
		"pepsi_workers":                           n,
		"pepsi_inflight":                          n,
		"pepsi_worker_starts_total":               n,
		"pepsi_worker_start_failures_total":       n,
		"pepsi_worker_stderr_dropped_lines_total": n,
		"pepsi_worker_stderr_cut_bytes_total":     n,
		"pepsi_listener_reconnects_total":         len(reasons),
		"pepsi_queue_retries_total":               len(reasons),
		"pepsi_orphans_rescued_total":             1,
		"pepsi_trace_spans_dropped_total":         1,
		"pepsi_trace_spans_total":                 1,
		"pepsi_dispatcher_healthy":                1,
		"pepsi_build_info":                        1,
		"pepsi_queue_depth":                       n * statuses,
		"pepsi_queue_oldest_pending_age_seconds":  n,
		"pepsi_stage_paused":                      n,
		"pepsi_queue_waiting_parents":             n,
		"pepsi_queue_open_children":               n,
		"pepsi_queue_count_failures_total":        1,
		"promhttp_metric_handler_errors_total":    2, // cause: encoding, gathering
	}
	checkFirstScrape(t, "the dispatcher's /metrics", obs.reg, got, want)

	// pepsi httpd's.
	stats := NewStats(StatsOptions{Source: src, Stages: stages, MaxAge: -1, Version: "test"})
	hsrv := NewServer(stats.Handler(), nil)
	if err := hsrv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer hsrv.Stop(ctx(t))
	if code, body := testkit.Get(t, "http://"+hsrv.Addr()+"/metrics"); code != http.StatusOK {
		t.Fatalf("pepsi httpd's /metrics: %d %s", code, body)
	}
	got = seriesCount(scrape(t, "http://"+hsrv.Addr()))
	want = map[string]int{
		"pepsi_dispatch_stats_updated_timestamp_seconds": 1,
		"pepsi_queue_messages":                           n * statuses,
		"pepsi_queue_oldest_pending_age_seconds":         n,
		"pepsi_stage_paused":                             n,
		"pepsi_queue_waiting_parents":                    n,
		"pepsi_queue_open_children":                      n,
		"pepsi_dispatcher_running":                       1,
		"pepsi_build_info":                               1,
		"promhttp_metric_handler_errors_total":           2,
	}
	for _, c := range stats.stageCol {
		want[descName.FindStringSubmatch(c.desc.String())[1]] = n
	}
	for _, c := range stats.dispCol {
		want[descName.FindStringSubmatch(c.desc.String())[1]] = 1
	}
	checkFirstScrape(t, "pepsi httpd's /metrics", stats.reg, got, want)
}

// checkFirstScrape compares a first scrape's series counts with want, and
// checks that want names every family the registry describes.
func checkFirstScrape(t *testing.T, what string, reg *prometheus.Registry, got, want map[string]int) {
	t.Helper()
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %s has %d series in the first scrape, want %d", what, name, got[name], n)
		}
	}
	for _, name := range described(t, reg) {
		if _, ok := want[name]; !ok && !strings.HasPrefix(name, "promhttp_") {
			t.Errorf("%s: %s is registered but this test does not know how many series it starts with", what, name)
		}
	}
}
