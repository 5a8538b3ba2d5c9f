package app

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// background is pepsi running in this process until stop.
type background struct {
	stderr *testkit.Buffer
	cancel context.CancelFunc
	code   chan int
}

// startPepsi runs "pepsi args..." in this process, as Main does, with a
// context that stop cancels (as SIGTERM does).
func startPepsi(t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{stderr: &testkit.Buffer{}, code: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	app := New("test", io.Discard, b.stderr, strings.NewReader(""))
	go func() { b.code <- report(b.stderr, app.RunContext(ctx, append([]string{"pepsi"}, args...))) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// stop cancels pepsi and returns its exit status.
func (b *background) stop(t *testing.T) int {
	t.Helper()
	b.cancel()
	select {
	case code := <-b.code:
		b.code <- code
		return code
	case <-time.After(time.Minute):
		t.Fatalf("pepsi did not stop; stderr:\n%s", b.stderr)
		return -1
	}
}

// addr waits for the log line msg="MSG" addr=ADDR and returns ADDR.
func (b *background) addr(t *testing.T, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`msg="?` + regexp.QuoteMeta(msg) + `"? addr=(\S+)`)
	var addr string
	testkit.Wait(t, "the line "+msg, time.Minute, func() bool {
		select {
		case code := <-b.code:
			b.code <- code
			t.Fatalf("pepsi exited %d; stderr:\n%s", code, b.stderr)
		default:
		}
		m := re.FindStringSubmatch(b.stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, b.stderr)
	return addr
}

// scrapeMetrics fetches base/metrics and parses it.
func scrapeMetrics(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := testkit.Get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET %s/metrics: %d\n%s", base, code, body)
	}
	return parseProm(t, body)
}

// samples renders a family's samples, one "labels value" string each, sorted.
func samples(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		out = append(out, fmt.Sprintf("{%s} %v", strings.Join(ls, ","), v))
	}
	sort.Strings(out)
	return out
}

// labelSets drops the values from samples' output.
func labelSets(samples []string) []string {
	out := make([]string, len(samples))
	for i, s := range samples {
		out[i], _, _ = strings.Cut(s, "} ")
	}
	return out
}

// TestHTTPD runs pepsi httpd in this process on a free port and checks
// over HTTP that it exports the statistics tables and the queue as they
// are, the very families pepsi stats --format prometheus prints.
func TestHTTPD(t *testing.T) {
	db, dsn := statsDB(t)
	env(t, dsn, stagesConf+"\n[stage-idle]\nPROGRAM = /bin/cat\n")
	holdDispatcherLock(t, dsn)

	p := startPepsi(t, "httpd", "--listen", "127.0.0.1:0")
	base := "http://" + p.addr(t, "listening")
	if code, body := testkit.Get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	got := scrapeMetrics(t, base)

	// What the tables hold.
	stages, global, err := db.ReadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stages {
		for _, c := range stageFields {
			if v := sample(t, got, "pepsi_stage_"+c.Name+"_total", "stage", st.Stage); v != c.value(&st) {
				t.Errorf("pepsi_stage_%s_total{%s} = %v, table says %v", c.Name, st.Stage, v, c.value(&st))
			}
		}
	}
	for _, c := range dispatchFields {
		if v := sample(t, got, "pepsi_dispatch_"+c.Name+"_total"); v != c.value(&global) {
			t.Errorf("pepsi_dispatch_%s_total = %v, table says %v", c.Name, v, c.value(&global))
		}
	}
	adb, err := admin.Open(context.Background(), dsn, queue.Options{App: pgtest.App})
	if err != nil {
		t.Fatal(err)
	}
	defer adb.Close()
	counts, err := adb.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counts {
		if v := sample(t, got, "pepsi_queue_messages", "stage", c.Stage, "status", string(c.Status)); v != float64(c.N) {
			t.Errorf("pepsi_queue_messages{%s,%s} = %v, table says %d", c.Stage, c.Status, v, c.N)
		}
	}
	if v := sample(t, got, "pepsi_queue_messages", "stage", "idle", "status", "pending"); v != 0 {
		t.Errorf("idle stage: %v", v)
	}
	if v := sample(t, got, "pepsi_dispatcher_running"); v != 1 {
		t.Errorf("pepsi_dispatcher_running = %v with the lock held", v)
	}
	if sample(t, got, "pepsi_build_info", "version", "test") != 1 || got["process_open_fds"] == nil {
		t.Error("no build info or process metrics")
	}

	// The same families as pepsi stats --format prometheus, sample for
	// sample (ages may differ by the time between the two reads).
	r := pepsi(t, "", "stats", "--format", "prometheus")
	r.wantCode(t, 0)
	want := parseProm(t, r.stdout)
	for name, wf := range want {
		gf := got[name]
		if gf == nil {
			t.Errorf("pepsi httpd lacks %s", name)
			continue
		}
		if gf.GetType() != wf.GetType() || gf.GetHelp() != wf.GetHelp() {
			t.Errorf("%s: httpd has %v %q, pepsi stats %v %q",
				name, gf.GetType(), gf.GetHelp(), wf.GetType(), wf.GetHelp())
		}
		gs, ws := samples(gf), samples(wf)
		if name == "pepsi_queue_oldest_pending_age_seconds" {
			for _, m := range gf.GetMetric() {
				st := m.GetLabel()[0].GetValue()
				if w := sample(t, want, name, "stage", st); math.Abs(m.GetGauge().GetValue()-w) > 60 {
					t.Errorf("%s{%s}: httpd %v, pepsi stats %v", name, st, m.GetGauge().GetValue(), w)
				}
			}
			gs, ws = labelSets(gs), labelSets(ws)
		}
		if fmt.Sprint(gs) != fmt.Sprint(ws) {
			t.Errorf("%s:\nhttpd:       %v\npepsi stats: %v", name, gs, ws)
		}
	}
	for name := range got {
		if strings.HasPrefix(name, "pepsi_") && want[name] == nil && name != "pepsi_build_info" {
			t.Errorf("pepsi httpd has %s, pepsi stats does not", name)
		}
	}

	// The tables change, in the rows of another writer (a dispatcher with a
	// stage set); a later scrape (once the last read is older than
	// httpdMaxAge) shows the sums.
	set, err := queue.Open(context.Background(), dsn, queue.Options{App: pgtest.App, Writer: queue.SetName([]string{"parse"})})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.AddStats(context.Background(), []queue.StageStats{{Stage: "parse", Processed: 5}}, queue.DispatchStats{Done: 1}); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, "the new counts", time.Minute, func() bool {
		got = scrapeMetrics(t, base)
		return sample(t, got, "pepsi_stage_processed_total", "stage", "parse") == 15 && sample(t, got, "pepsi_dispatch_done_total") == 7
	}, p.stderr)

	if code := p.stop(t); code != 0 {
		t.Errorf("exit %d after stop; stderr:\n%s", code, p.stderr)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after stop")
	}
}

// TestHTTPDDatabaseDown: with the database unreachable pepsi httpd still
// starts; a scrape fails with 500 (Prometheus's up is 0) and /healthz is
// 503; the failure is logged once, not per scrape.
func TestHTTPDDatabaseDown(t *testing.T) {
	env(t, "postgres://nobody@127.0.0.1:1/nothing?connect_timeout=5", "")
	p := startPepsi(t, "httpd", "--listen", "127.0.0.1:0")
	base := "http://" + p.addr(t, "listening")
	for range 2 {
		if code, body := testkit.Get(t, base+"/metrics"); code != http.StatusInternalServerError || !strings.Contains(body, "reading the statistics") {
			t.Errorf("/metrics: %d %q, want 500", code, body)
		}
	}
	if code, body := testkit.Get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "connect") {
		t.Errorf("/healthz: %d %q, want 503", code, body)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
	logs := p.stderr.String()
	if n := strings.Count(logs, "reading the statistics failed"); n != 1 {
		t.Errorf("the failure was logged %d times:\n%s", n, logs)
	}
}

func TestHTTPDBadInput(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	env(t, "postgres:///x", "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"httpd", "--listen", "localhost"}, 2, `pepsi httpd: --listen "localhost": want HOST:PORT or :PORT`},
		{[]string{"httpd", "--listen", "localhost:"}, 2, `pepsi httpd: --listen "localhost:": no port`},
		{[]string{"httpd", "--listen", ":70000"}, 2, `pepsi httpd: --listen ":70000": port 70000 out of range`},
		{[]string{"httpd", "--listen", ":0", "extra"}, 2, `pepsi httpd: unexpected argument "extra"`},
		{[]string{"httpd", "--listen", ":0", "--log-format", "xml"}, 2, `pepsi httpd: --log-format "xml"`},
		{[]string{"httpd", "--listen", busy}, 1, "pepsi httpd: --listen " + busy + ": bind: address already in use"},
	} {
		r := pepsi(t, "", tc.args...)
		r.wantCode(t, tc.code)
		r.wantOneError(t, tc.want)
	}
	t.Setenv("PEPSI_DSN", "postgres://x:notaport/y")
	r := pepsi(t, "", "httpd", "--listen", ":0")
	r.wantCode(t, 2)
	r.wantOneError(t, "pepsi httpd: PEPSI_DSN: ")
}

// TestHTTPDBinary runs the real executable through a pepsi-httpd symlink:
// it serves, and exits 0 on SIGTERM.
func TestHTTPDBinary(t *testing.T) {
	bin := binary(t)
	link := filepath.Join(t.TempDir(), "pepsi-httpd")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	_, dsn := statsDB(t)
	env(t, dsn, "")
	httpd := startChild(t, link, "--listen", "127.0.0.1:0", "--log-format", "json")
	logs := httpd.logs
	re := regexp.MustCompile(`"addr":"([^"]+)"`)
	var addr string
	testkit.Wait(t, "the listening line", time.Minute, func() bool {
		m := re.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, logs)
	fams := scrapeMetrics(t, "http://"+addr)
	if v := sample(t, fams, "pepsi_stage_processed_total", "stage", "parse"); v != 10 {
		t.Errorf("pepsi_stage_processed_total{parse} = %v", v)
	}
	httpd.stop(t)
}

// TestDispatchMetrics runs pepsi dispatch in this process with
// METRICS_LISTEN and checks its /metrics and /healthz against what a
// pipeline of 20 messages did; and that an address in use is an error.
func TestDispatchMetrics(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatal("psql is needed for the shell stage program: apt-get install postgresql-client")
	}
	db, dsn := pgtest.New(t)
	dir := t.TempDir()
	stage := filepath.Join(dir, "finish.sh")
	if err := os.WriteFile(stage, []byte(shellStage), 0o755); err != nil {
		t.Fatal(err)
	}
	env(t, dsn, "[pepsi-dispatch]\nMETRICS_LISTEN = 127.0.0.1:0\n\n[stage-work]\nPROGRAM = "+stage+"\nPARALLELISM = 2\n")
	if _, err := db.EnqueueBulk(context.Background(), queue.Bulk{Stage: "work", Payloads: make([][]byte, 20)}); err != nil {
		t.Fatal(err)
	}
	p := startPepsi(t, "dispatch")
	base := "http://" + p.addr(t, "serving metrics")
	var fams map[string]*dto.MetricFamily
	testkit.Wait(t, "20 passes", time.Minute, func() bool {
		fams = scrapeMetrics(t, base)
		return sample(t, fams, "pepsi_stage_results_total", "stage", "work", "result", "ok") == 20 &&
			sample(t, fams, "pepsi_inflight", "stage", "work") == 0
	}, p.stderr)
	if v := sample(t, fams, "pepsi_dispatch_total", "stage", "work"); v != 20 {
		t.Errorf("pepsi_dispatch_total{work} = %v", v)
	}
	if v := sample(t, fams, "pepsi_worker_starts_total", "stage", "work"); v < 1 || v > 2 {
		t.Errorf("pepsi_worker_starts_total{work} = %v", v)
	}
	testkit.Wait(t, "the queue counted done", time.Minute, func() bool {
		fams = scrapeMetrics(t, base)
		return sample(t, fams, "pepsi_queue_depth", "stage", "work", "status", "done") == 20
	}, p.stderr)
	if code, _ := testkit.Get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while running: %d", code)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, p.stderr)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after the dispatcher stopped")
	}

	// An address in use: exit 1 before the dispatcher starts.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	env(t, dsn, "[pepsi-dispatch]\nMETRICS_LISTEN = "+busy+"\n\n[stage-work]\nPROGRAM = "+stage+"\n")
	r := pepsi(t, "", "dispatch")
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi dispatch: METRICS_LISTEN "+busy+": bind: address already in use")
}
