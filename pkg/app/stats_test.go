package app

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// statsDB is a database with statistics and messages to report.
func statsDB(t *testing.T) (*pgtest.DB, string) {
	t.Helper()
	db, dsn := pgtest.New(t)
	err := db.AddStats(context.Background(), []queue.StageStats{
		{Stage: "parse", Processed: 10, Failed: 2, Timeouts: 1, Crashes: 1, Cancelled: 1, BusySeconds: 12.5},
		{Stage: "store", Processed: 7, BusySeconds: 0.25},
	}, queue.DispatchStats{Claimed: 20, StagePasses: 19, Requeued: 7, Done: 6, Failed: 2, Paused: 1, Resumed: 1, Reset: 3, Orphans: 4})
	if err != nil {
		t.Fatal(err)
	}
	seedQueue(t, db, "parse", queue.Pending, 3)
	seedQueue(t, db, "store", queue.Done, 6)
	seedQueue(t, db, "store", queue.Failed, 2)
	return db, dsn
}

func TestStatsTable(t *testing.T) {
	_, dsn := statsDB(t)
	env(t, dsn, "")
	r := pepsi(t, "", "stats")
	r.wantCode(t, 0)
	tables := strings.Split(r.stdout, "\n\n")
	if len(tables) != 2 {
		t.Fatalf("stats:\n%s", r.stdout)
	}
	rows := fields(tables[0])
	if strings.Join(rows[0], " ") != "STAGE processed failed_passes timeouts crashes not_run cancelled busy_seconds updated_at" || len(rows) != 3 {
		t.Fatalf("stage table:\n%s", tables[0])
	}
	if got := strings.Join(rows[1][:8], " "); got != "parse 10 2 1 1 0 1 12.500" {
		t.Errorf("parse row %q", got)
	}
	if got := strings.Join(rows[2][:8], " "); got != "store 7 0 0 0 0 0 0.250" {
		t.Errorf("store row %q", got)
	}
	want := map[string]string{"claimed": "20", "stage_passes": "19", "requeued": "7", "done": "6", "failed_messages": "2",
		"paused": "1", "resumed": "1", "reset": "3", "orphans": "4"}
	rows = fields(tables[1])
	if strings.Join(rows[0], " ") != "DISPATCH VALUE" {
		t.Fatalf("dispatch table:\n%s", tables[1])
	}
	seen := map[string]string{}
	for _, r := range rows[1:] {
		seen[r[0]] = r[1]
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("dispatch %s = %q, want %s", k, seen[k], v)
		}
	}
	if _, ok := seen["updated_at"]; !ok {
		t.Errorf("no updated_at:\n%s", tables[1])
	}
}

func TestStatsJSON(t *testing.T) {
	_, dsn := statsDB(t)
	env(t, dsn, "")
	l := holdDispatcherLock(t, dsn)
	r := pepsi(t, "", "stats", "--format", "json")
	r.wantCode(t, 0)
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("not one line:\n%s", r.stdout)
	}
	var got struct {
		Stages     []queue.StageStats  `json:"stages"`
		Dispatch   queue.DispatchStats `json:"dispatch"`
		Queue      []queueCount        `json:"queue"`
		Dispatcher struct {
			Running bool  `json:"running"`
			PID     int32 `json:"server_pid"`
		} `json:"dispatcher"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Stages) != 2 || got.Stages[0].Stage != "parse" || got.Stages[0].Processed != 10 || got.Stages[0].BusySeconds != 12.5 ||
		got.Stages[1].Stage != "store" || got.Stages[1].Processed != 7 || got.Stages[0].UpdatedAt.IsZero() {
		t.Errorf("stages %+v", got.Stages)
	}
	if d := got.Dispatch; d.Claimed != 20 || d.StagePasses != 19 || d.Orphans != 4 || d.UpdatedAt.IsZero() {
		t.Errorf("dispatch %+v", d)
	}
	wantQ := []queueCount{{Stage: "parse", Status: queue.Pending, Messages: 3}, {Stage: "store", Status: queue.Done, Messages: 6}, {Stage: "store", Status: queue.Failed, Messages: 2}}
	if len(got.Queue) != len(wantQ) {
		t.Fatalf("queue %+v", got.Queue)
	}
	for i, q := range got.Queue {
		if q.Stage != wantQ[i].Stage || q.Status != wantQ[i].Status || q.Messages != wantQ[i].Messages || q.OldestAge < 0 {
			t.Errorf("queue[%d] = %+v, want %+v", i, q, wantQ[i])
		}
	}
	if !got.Dispatcher.Running || got.Dispatcher.PID != int32(l.PID()) {
		t.Errorf("dispatcher %+v", got.Dispatcher)
	}
	if _, ok := raw["time"]; !ok {
		t.Errorf("no time in %s", r.stdout)
	}
}

// parseProm parses Prometheus text with the parser Prometheus uses.
func parseProm(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse prometheus text: %v\n%s", err, text)
	}
	return fams
}

// sample returns the value of the sample of family name with labels.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no family %s", name)
	}
	for _, m := range f.Metric {
		match := len(m.Label) == len(labels)/2
		for i := 0; match && i < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
			}
			match = found
		}
		if !match {
			continue
		}
		if m.TimestampMs != nil {
			t.Errorf("%s has a timestamp: the textfile collector refuses it", name)
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		}
		t.Fatalf("%s: type %v", name, f.GetType())
	}
	t.Fatalf("no sample %s%v", name, labels)
	return 0
}

func TestStatsPrometheus(t *testing.T) {
	_, dsn := statsDB(t)
	// A configured stage that never ran still has its series.
	env(t, dsn, stagesConf+"\n[stage-idle]\nPROGRAM = /bin/cat\n")
	r := pepsi(t, "", "stats", "--format", "prometheus")
	r.wantCode(t, 0)
	fams := parseProm(t, r.stdout)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pepsi_stage_processed_total", []string{"stage", "parse"}, 10},
		{"pepsi_stage_failed_total", []string{"stage", "parse"}, 2},
		{"pepsi_stage_timeouts_total", []string{"stage", "parse"}, 1},
		{"pepsi_stage_crashes_total", []string{"stage", "parse"}, 1},
		{"pepsi_stage_busy_seconds_total", []string{"stage", "parse"}, 12.5},
		{"pepsi_stage_busy_seconds_total", []string{"stage", "store"}, 0.25},
		{"pepsi_stage_processed_total", []string{"stage", "idle"}, 0},
		{"pepsi_dispatch_claimed_total", nil, 20},
		{"pepsi_dispatch_stage_passes_total", nil, 19},
		{"pepsi_dispatch_requeued_total", nil, 7},
		{"pepsi_dispatch_done_total", nil, 6},
		{"pepsi_dispatch_failed_total", nil, 2},
		{"pepsi_dispatch_paused_total", nil, 1},
		{"pepsi_dispatch_resumed_total", nil, 1},
		{"pepsi_dispatch_reset_total", nil, 3},
		{"pepsi_dispatch_orphans_total", nil, 4},
		{"pepsi_queue_messages", []string{"stage", "parse", "status", "pending"}, 3},
		{"pepsi_queue_messages", []string{"stage", "parse", "status", "done"}, 0},
		{"pepsi_queue_messages", []string{"stage", "store", "status", "done"}, 6},
		{"pepsi_queue_messages", []string{"stage", "store", "status", "failed"}, 2},
		{"pepsi_queue_messages", []string{"stage", "idle", "status", "running"}, 0},
		{"pepsi_queue_oldest_pending_age_seconds", []string{"stage", "store"}, 0},
		{"pepsi_dispatcher_running", nil, 0},
	} {
		if got := sample(t, fams, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if age := sample(t, fams, "pepsi_queue_oldest_pending_age_seconds", "stage", "parse"); age < 0 || age > 3600 {
		t.Errorf("oldest pending age %v", age)
	}
	if ts := sample(t, fams, "pepsi_dispatch_stats_updated_timestamp_seconds"); ts < 1e9 {
		t.Errorf("updated timestamp %v", ts)
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "pepsi_") || f.GetHelp() == "" || strings.HasPrefix(f.GetHelp(), "Column ") {
			t.Errorf("family %s: help %q", name, f.GetHelp())
		}
		if f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s does not end in _total", name)
		}
		if strings.HasPrefix(name, "pepsi_stage_") && len(f.Metric) != 3 {
			t.Errorf("%s has %d series, want one per stage (3)", name, len(f.Metric))
		}
	}
	// Every counter of the statistics tables is exported (with its own
	// help: checked above).
	for _, f := range stageFields {
		if fams["pepsi_stage_"+f.Name+"_total"] == nil {
			t.Errorf("stage_stats.%s: not exported", f.Name)
		}
	}
	for _, f := range dispatchFields {
		if fams["pepsi_dispatch_"+f.Name+"_total"] == nil {
			t.Errorf("dispatch_stats.%s: not exported", f.Name)
		}
	}

	holdDispatcherLock(t, dsn)
	r = pepsi(t, "", "stats", "-f", "prometheus")
	if got := sample(t, parseProm(t, r.stdout), "pepsi_dispatcher_running"); got != 1 {
		t.Errorf("pepsi_dispatcher_running = %v with a dispatcher", got)
	}
}

// outputDir points pepsi at a database with statistics and returns a
// temporary directory holding one file, name, with "old contents\n".
func outputDir(t *testing.T, name string) (dir, file string) {
	t.Helper()
	_, dsn := statsDB(t)
	env(t, dsn, "")
	dir = t.TempDir()
	file = filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte("old contents\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

func TestStatsOutput(t *testing.T) {
	dir, out := outputDir(t, "pepsi.prom")
	r := pepsi(t, "", "stats", "--format", "prometheus", "--output", out)
	r.wantCode(t, 0)
	if r.stdout != "" || r.stderr != "" {
		t.Fatalf("--output wrote stdout %q, stderr %q", r.stdout, r.stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	parseProm(t, string(data))
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v (%v), want 0644 so that node_exporter can read it", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}

	// JSON to a file in the working directory, by a relative name.
	t.Chdir(dir)
	r = pepsi(t, "", "stats", "-f", "json", "-o", "stats.json")
	r.wantCode(t, 0)
	data, err = os.ReadFile(filepath.Join(dir, "stats.json"))
	var v map[string]any
	if err != nil || json.Unmarshal(data, &v) != nil || v["dispatch"] == nil {
		t.Fatalf("stats.json: %s (%v)", data, err)
	}

	// A directory that does not exist: exit 1, naming the file; nothing left.
	missing := filepath.Join(dir, "nope", "pepsi.prom")
	r = pepsi(t, "", "stats", "-o", missing)
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi stats: --output "+missing+": no such file or directory")
}

func TestStatsBadInput(t *testing.T) {
	_, dsn := pgtest.New(t)
	env(t, dsn, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "--format", "xml"}, `pepsi stats: --format "xml": want table, json or prometheus`},
		{[]string{"stats", "--output", ""}, "pepsi stats: --output is empty"},
		{[]string{"stats", "now"}, `pepsi stats: unexpected argument "now"`},
		{[]string{"stats", "--bogus"}, "pepsi stats: flag provided but not defined: -bogus"},
	} {
		r := pepsi(t, "", tc.args...)
		r.wantCode(t, 2)
		r.wantOneError(t, tc.want)
	}
	// An unmigrated database: exit 1, saying what to do.
	env(t, pgtest.Empty(t), "")
	r := pepsi(t, "", "stats")
	r.wantCode(t, 1)
	r.wantOneError(t, "run 'pepsi migrate'")
}

// TestStatsOutputNotRegular: --output writes only a regular file or a new
// one. A FIFO, a device, a directory or a symbolic link (to a file or to
// nothing) is refused with one line naming --output, the path and what it
// is (exit 2), and left as it was; "-" is standard output.
func TestStatsOutputNotRegular(t *testing.T) {
	dir, file := outputDir(t, "target.prom")
	// refused runs pepsi stats -o path and wants it refused with want,
	// path's type unchanged and nothing new in its directory.
	refused := func(t *testing.T, path, want string) {
		t.Helper()
		before, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		r := pepsi(t, "", "stats", "-f", "prometheus", "--output", path)
		r.wantCode(t, 2)
		r.wantOneError(t, "pepsi stats: --output "+path+": "+want)
		after, err := os.Lstat(path)
		if err != nil || after.Mode() != before.Mode() {
			t.Fatalf("%s was %v, is %v (%v)", path, before.Mode(), after, err)
		}
		if now, _ := os.ReadDir(filepath.Dir(path)); len(now) != len(entries) {
			t.Fatalf("%s: %d entries before, %d after: %v", filepath.Dir(path), len(entries), len(now), now)
		}
	}
	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		refused(t, fifo, "a named pipe (FIFO), not a regular file: left as it is")
	})
	t.Run("device", func(t *testing.T) {
		// A node of /dev/null's device (1, 3) of our own; only root may make one.
		dev := filepath.Join(dir, "null")
		if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Skipf("mknod: %v", err)
		}
		refused(t, dev, "a character device, not a regular file: left as it is")
	})
	t.Run("directory", func(t *testing.T) {
		sub := filepath.Join(dir, "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		refused(t, sub, "a directory, not a regular file")
	})
	// A link is refused whatever it points to, and what it points to is
	// left as it was: the file, or nothing.
	nowhere := filepath.Join(dir, "nowhere.prom")
	for _, tc := range []struct{ name, target, want string }{
		{"symlink", file, file},
		{"dangling", nowhere, nowhere + ", which does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			link := filepath.Join(dir, tc.name+".prom")
			if err := os.Symlink(tc.target, link); err != nil {
				t.Fatal(err)
			}
			refused(t, link, "a symbolic link (to "+tc.want+"), not a regular file: left as it is; name the file itself")
		})
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "old contents\n" {
		t.Errorf("the link's target holds %q (%v)", data, err)
	}
	if _, err := os.Lstat(nowhere); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was made: %v", err)
	}
	t.Run("stdout", func(t *testing.T) {
		t.Chdir(dir)
		r := pepsi(t, "", "stats", "-f", "prometheus", "--output", "-")
		r.wantCode(t, 0)
		parseProm(t, r.stdout)
		if _, err := os.Lstat(filepath.Join(dir, "-")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("--output - made a file named -: %v", err)
		}
	})
	t.Run("devnull", func(t *testing.T) {
		// /dev/null itself: it must stay the character device it is (only
		// its mode is read; it is a device every run writes to anyway).
		st, err := os.Lstat("/dev/null")
		if err != nil || st.Mode()&fs.ModeCharDevice == 0 {
			t.Skipf("/dev/null is %v (%v)", st, err)
		}
		r := pepsi(t, "", "stats", "--output", "/dev/null")
		r.wantCode(t, 2)
		r.wantOneError(t, "pepsi stats: --output /dev/null: a character device, not a regular file: left as it is")
		if st2, err := os.Lstat("/dev/null"); err != nil || st2.Mode() != st.Mode() {
			t.Fatalf("/dev/null was %v, is %v (%v)", st.Mode(), st2, err)
		}
	})
}
