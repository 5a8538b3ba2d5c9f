package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// scheduleSite is a site with stages a and b (the test worker, which
// finishes every message it is handed) and the given [schedule-NAME]
// sections.
func scheduleSite(t *testing.T, schedules string) *bundle {
	t.Helper()
	worker := testkit.Worker(t)
	conf := fmt.Sprintf("[pepsi-dispatch]\nPOLL_INTERVAL = 1\nRECONNECT_MIN = 0.2\nRECONNECT_MAX = 1\nSHUTDOWN_GRACE = 2\n"+
		"[stage-a]\nPROGRAM = %s\n[stage-b]\nPROGRAM = %s\n%s", worker, worker, schedules)
	site := testkit.NewSite(t, conf)
	site.WorkerTables()
	cfg, err := config.Load(site.Path)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{site: site, t: t, db: site.DB, dsn: site.DSN, cfg: cfg, logs: site.Logs}
}

// slots returns the slots (Unix seconds) of schedule name's messages, in
// order, one entry a message: a slot enqueued twice is there twice.
func (b *bundle) slots(name string) []int64 {
	b.t.Helper()
	keys := b.site.IDs("SELECT substr(dedup_key, length($1) + 1)::bigint FROM pepsi.state WHERE dedup_key LIKE $1 || '%' ORDER BY 1",
		"schedule:"+name+":")
	return keys
}

// once checks that no slot of schedule name was enqueued twice, and
// returns its slots.
func (b *bundle) once(name string) []int64 {
	b.t.Helper()
	s := b.slots(name)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			b.t.Errorf("schedule %s: slot %s enqueued more than once (slots %v)", name, time.Unix(s[i], 0).UTC().Format(time.TimeOnly), s)
		}
	}
	return s
}

// gaps returns the pairs of consecutive slots at least min seconds apart.
func gaps(slots []int64, min int64) [][2]int64 {
	var g [][2]int64
	for i := 1; i < len(slots); i++ {
		if slots[i]-slots[i-1] >= min {
			g = append(g, [2]int64{slots[i-1], slots[i]})
		}
	}
	return g
}

// daemon is a running `pepsi dispatch`, the binary, on the site.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	logs   *testkit.Buffer
	exited chan struct{}
}

// startDaemon starts `pepsi -c CONF dispatch ARGS…`; it is killed when the
// test ends, and its log shown if the test failed.
func (b *bundle) startDaemon(name string, args ...string) *daemon {
	b.t.Helper()
	pepsi := testkit.Build(b.t, "github.com/pepsi-dev/pepsi/cmd/pepsi")
	cmd := exec.Command(pepsi, append([]string{"-c", b.site.Path, "dispatch", "--log-level", "debug"}, args...)...)
	d := &daemon{name: name, cmd: cmd, logs: &testkit.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = d.logs
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()
	b.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.exited
		if b.t.Failed() {
			b.t.Logf("%s log:\n%s", name, d.logs)
		}
	})
	return d
}

// waitLog waits until d has logged s.
func (b *bundle) waitDaemonLog(d *daemon, s string) {
	b.t.Helper()
	b.waitFor(d.name+" to log "+strconv.Quote(s), time.Minute, func() bool { return strings.Contains(d.logs.String(), s) })
}

// signal sends sig to d and waits for it to exit.
func (b *bundle) signal(d *daemon, sig syscall.Signal) {
	b.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		b.t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		b.t.Fatalf("%s did not exit after %v; log:\n%s", d.name, sig, d.logs)
	}
}

// janitorLog is what a scheduler logs when it starts.
const janitorLog = "schedules: this dispatcher enqueues them (janitor)"

// TestScheduleTakeover: two schedules enqueue each slot exactly once while
// the janitor role changes hands: the dispatcher that holds it (stage set
// a) is killed with SIGKILL, a standby of its set and the dispatcher of set b
// (both running) race for it, one takes it and goes on. Every message
// finishes at once, so its key is free again: only pepsi.schedule stops
// the new janitor from enqueueing again the slot the dead one enqueued
// last (it is, with CRON every 4 seconds, the latest slot at the
// takeover).
func TestScheduleTakeover(t *testing.T) {
	b := scheduleSite(t, `
[schedule-second]
EVERY = 1
STAGE = a
PAYLOAD = tick
[schedule-four]
CRON = */4 * * * * *
STAGE = b
HEADERS = {"source": "cron"}
PRIORITY = 7
`)
	first := b.startDaemon("dispatcher a", "--stages", "a")
	b.waitDaemonLog(first, janitorLog)
	setB := b.startDaemon("dispatcher b", "--stages", "b")
	b.waitDaemonLog(setB, "dispatcher started")
	standby := b.startDaemon("standby a", "--stages", "a", "--standby")
	b.waitDaemonLog(standby, "standby: waiting for the dispatcher lock")
	b.waitFor("slots of the first janitor", time.Minute, func() bool { return len(b.slots("four")) >= 2 })

	killed := time.Now()
	b.signal(first, syscall.SIGKILL)
	b.waitFor("the standby taking over", time.Minute, func() bool {
		return strings.Contains(standby.logs.String(), "standby: took over the dispatcher lock")
	})
	b.waitFor("a new janitor's schedules", time.Minute, func() bool {
		return strings.Contains(standby.logs.String(), janitorLog) || strings.Contains(setB.logs.String(), janitorLog)
	})
	var after int
	b.waitFor("slots of the new janitor", time.Minute, func() bool {
		after = 0
		for _, s := range b.slots("four") {
			if s > killed.Unix()+1 {
				after++
			}
		}
		return after >= 3
	})
	stopped := time.Now()
	b.signal(standby, syscall.SIGTERM)
	b.signal(setB, syscall.SIGTERM)

	if strings.Contains(standby.logs.String(), janitorLog) == strings.Contains(setB.logs.String(), janitorLog) {
		t.Errorf("janitor after the kill: standby %v, set b %v; want exactly one", strings.Contains(standby.logs.String(), janitorLog),
			strings.Contains(setB.logs.String(), janitorLog))
	}
	second, four := b.once("second"), b.once("four")
	t.Logf("slots: second %d, four %d (%d after the kill)", len(second), len(four), after)
	for _, s := range four {
		if s%4 != 0 {
			t.Errorf("schedule four: slot %d is not a multiple of 4 seconds", s)
		}
	}
	// EVERY = 1: every second, but for the takeover, and a wake-up or an
	// enqueue late by a second (a loaded machine): it enqueues the latest
	// slot, and the one it was late for is missed.
	t.Logf("schedule second: gaps %v (killed at %d)", gaps(second, 2), killed.Unix())
	// Every message done, its key free again (but those of the last
	// slots: the janitor enqueues while it stops, and the dispatchers
	// may have stopped claiming), with what the section gives.
	if n := b.int64(`SELECT count(*) FROM pepsi.state WHERE dedup_key LIKE 'schedule:%' AND status <> 'done'
		AND split_part(dedup_key, ':', 3)::bigint < $1`, stopped.Unix()-1); n != 0 {
		t.Errorf("%d scheduled messages not done", n)
	}
	if n := b.int64(`SELECT count(*) FROM pepsi.state s JOIN pepsi.message m USING (id)
		WHERE s.dedup_key LIKE 'schedule:four:%' AND (s.priority <> 7 OR m.headers <> '{"source": "cron"}' OR m.payload <> '')`); n != 0 {
		t.Errorf("%d messages of schedule four without its priority, headers or payload", n)
	}
	if n := b.int64(`SELECT count(*) FROM pepsi.state s JOIN pepsi.message m USING (id)
		WHERE s.dedup_key LIKE 'schedule:second:%' AND (s.stage <> 'a' OR m.payload <> 'tick')`); n != 0 {
		t.Errorf("%d messages of schedule second not at stage a with its payload", n)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.schedule WHERE name = 'four' AND extract(epoch FROM last_slot)::bigint = $1", four[len(four)-1]); n != 1 {
		t.Errorf("pepsi.schedule's last slot of four is not its last message's")
	}
}

// TestScheduleMissed: what was missed while no dispatcher ran comes as one
// message, the latest missed slot's. A day without a janitor (the last
// slots recorded a day back) gives one message per schedule, not 24; and
// a dispatcher stopped for 4 seconds, with a schedule of every second,
// leaves a gap of one message when it starts again.
func TestScheduleMissed(t *testing.T) {
	b := scheduleSite(t, `
[schedule-hourly]
CRON = @hourly
STAGE = a
[schedule-every]
EVERY = 1h
STAGE = b
[schedule-second]
EVERY = 1
STAGE = a
`)
	ctx := context.Background()
	start := time.Now()
	hour := start.Truncate(time.Hour)
	for _, name := range []string{"hourly", "every"} {
		if _, err := b.db.Pool.Exec(ctx, "INSERT INTO pepsi.schedule (name, since, last_slot) VALUES ($1, $2, $2)", name, hour.Add(-24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	b.start()
	b.waitFor("the hourly slots", time.Minute, func() bool { return len(b.slots("hourly")) > 0 && len(b.slots("every")) > 0 })
	b.waitFor("a few seconds", time.Minute, func() bool { return len(b.slots("second")) >= 3 })
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	time.Sleep(4 * time.Second)
	b.start()
	b.waitFor("a few seconds more", time.Minute, func() bool {
		s := b.slots("second")
		return len(s) > 0 && s[len(s)-1] > stopped.Unix()+6
	})
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"hourly", "every"} {
		s := b.once(name)
		// An hour may have begun since: its slot then comes as well.
		if len(s) == 0 || s[0] != hour.Unix() && s[0] != hour.Add(time.Hour).Unix() || len(s) > 1 && s[1] != hour.Add(time.Hour).Unix() || len(s) > 2 {
			t.Errorf("schedule %s: slots %v, want %d (and at most the next hour's)", name, s, hour.Unix())
		}
	}
	if want := "missed=23"; strings.Count(b.logs.String(), want) < 2 && !strings.Contains(b.logs.String(), "missed=24") {
		t.Errorf("the log does not say the hourly schedules missed 23 slots")
	}
	second := b.once("second")
	long := gaps(second, 4)
	if len(long) != 1 || long[0][0] > stopped.Unix() {
		t.Errorf("schedule second: gaps of 4 seconds or more %v (stopped at %d), want one: the 4 seconds stopped as one slot", long, stopped.Unix())
	}
	t.Logf("schedule second: %d slots, gaps %v", len(second), gaps(second, 2))
	if !slices.IsSorted(second) {
		t.Errorf("slots out of order: %v", second)
	}
}

// TestScheduleRefusedSlot: a schedule whose message the server refuses
// for its values holds up no other. Schedule p's headers hold a NUL, which
// jsonb cannot (SQLSTATE 22P05; pepsi.conf refuses it now, so it is put in
// after loading, as a value the loader cannot foresee would come): each of
// its slots is skipped, logged as schedule p's, and recorded in
// pepsi.schedule without a message, while schedule q, after it, enqueues
// every slot. Nothing blames the database or waits for it.
func TestScheduleRefusedSlot(t *testing.T) {
	b := scheduleSite(t, "[schedule-p]\nEVERY = 1\nSTAGE = a\n[schedule-q]\nEVERY = 1\nSTAGE = b\n")
	b.cfg.Schedules[0].Headers = map[string]string{"a": "\x00"}
	const skipped = `msg="schedule p: the database refused the slot's message; skipped it, the next slot is tried as usual"`
	b.start()
	b.waitFor("schedule q's slots", time.Minute, func() bool { return len(b.slots("q")) >= 4 })
	b.waitFor("two of p's slots skipped", time.Minute, func() bool { return strings.Count(b.logs.String(), skipped) >= 2 })
	b.waitSettled(time.Minute)
	b.checkInvariants()

	logs := b.logs.String()
	if p := b.slots("p"); len(p) != 0 {
		t.Errorf("schedule p: slots %v enqueued, want none", p)
	}
	q := b.once("q")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, skipped) && (!strings.Contains(line, "SQLSTATE 22P05") || !strings.Contains(line, "stage=a")) {
			t.Errorf("the skip does not say why, or where: %s", line)
		}
	}
	if strings.Contains(logs, "database: schedule") {
		t.Errorf("a refused slot is logged as the database's failure:\n%s", logs)
	}
	// pepsi.schedule: p's last slot skipped (no message), q's enqueued.
	if n := b.int64("SELECT count(*) FROM pepsi.schedule WHERE name = 'p' AND last_slot IS NOT NULL AND last_id IS NULL AND last_at IS NOT NULL"); n != 1 {
		t.Errorf("pepsi.schedule: p's last slot not recorded as skipped")
	}
	if n := b.int64("SELECT count(*) FROM pepsi.schedule WHERE name = 'q' AND extract(epoch FROM last_slot)::bigint = $1 AND last_id IS NOT NULL", q[len(q)-1]); n != 1 {
		t.Errorf("pepsi.schedule: q's last slot is not its last message's")
	}
}

// TestScheduleConfigErrors: a bad [schedule-NAME] stops pepsi dispatch
// (and every other command, doctor among them) before it starts: one line naming the file,
// the line and the key, exit status 2.
func TestScheduleConfigErrors(t *testing.T) {
	pepsi := testkit.Build(t, "github.com/pepsi-dev/pepsi/cmd/pepsi")
	dir := t.TempDir()
	head := "[database]\nDSN = postgres:///nosuch?host=/nonexistent\n[stage-a]\nPROGRAM = /bin/true\n[schedule-s]\nSTAGE = a\n"
	tests := []struct{ keys, want string }{
		{"CRON = */5 * * *\n", `pepsi.conf:7: CRON: bad cron expression "*/5 * * *": expected 5 to 6 fields, found 4: [*/5 * * *]`},
		{"CRON = * * * * *\nEVERY = 5m\n", `pepsi.conf:8: EVERY: give CRON or EVERY, not both (CRON at line 7)`},
		{"EVERY = 0\n", `pepsi.conf:7: EVERY: must be greater than zero, not "0"`},
		{"EVERY = -5m\n", `pepsi.conf:7: EVERY: must be greater than zero, not "-5m"`},
		{"EVERY = 5m\nPRIORITY = urgent\n", `pepsi.conf:8: PRIORITY: bad priority "urgent"`},
		{"EVERY = 5m\nSTAGE = x\n", `pepsi.conf:8: duplicate key "STAGE" in [schedule-s] (first at line 6)`},
		{"EVERY = 5m\n[schedule-t]\nEVERY = 5m\nSTAGE = a/b\n", `pepsi.conf:10: STAGE: bad stage name "a/b"`},
		{"EVERY = 5m\n[schedule-t]\nEVERY = 5m\nSTAGE = nosuch\n", `pepsi.conf:10: STAGE: unknown stage "nosuch" (no [stage-nosuch] section)`},
		{"EVERY = 2\nHEADERS = {\"a\": \"\\u0000\"}\n[schedule-q]\nEVERY = 2\nSTAGE = a\n",
			`pepsi.conf:8: HEADERS: \u0000 (NUL) at byte 8: PostgreSQL's jsonb cannot hold it`},
		{"CRON = TZ=Local 0 9 * * *\n", `pepsi.conf:7: CRON: bad cron expression "TZ=Local 0 9 * * *": TZ=Local is the zone of whichever host reads it`},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, strconv.Itoa(i), "pepsi.conf")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(head+tt.keys), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, command := range [][]string{{"dispatch"}, {"queue"}, {"doctor"}} {
			out, err := exec.Command(pepsi, append([]string{"-c", path}, command...)...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("pepsi %s with %q: %v, want exit status 2; output:\n%s", command[0], tt.keys, err, out)
				continue
			}
			want := "pepsi " + command[0] + ": " + filepath.Dir(path) + "/" + tt.want
			if line := strings.TrimSuffix(string(out), "\n"); !strings.HasPrefix(line, want) || strings.Contains(line, "\n") {
				t.Errorf("pepsi %s with %q:\n got %s\nwant %s…", command[0], tt.keys, out, want)
			}
		}
	}
}

// failingStore fails its first fails calls, and every call for the
// schedule refused names with its error; it records the slots it is asked
// to enqueue.
type failingStore struct {
	mu      sync.Mutex
	fails   int
	refused string
	refusal error
	slots   []time.Time
}

func (f *failingStore) Reset() {}

func (f *failingStore) FireSchedule(ctx context.Context, o queue.Occurrence) (queue.Fired, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o.Schedule == f.refused {
		return queue.Fired{}, f.refusal
	}
	if f.fails > 0 {
		f.fails--
		return queue.Fired{}, errors.New("connection refused")
	}
	f.slots = append(f.slots, o.Slot)
	return queue.Fired{Enqueued: true, ID: int64(len(f.slots)), After: o.Slot.Add(-time.Second)}, nil
}

func (f *failingStore) SkipSchedule(ctx context.Context, o queue.Occurrence) (bool, error) {
	return false, errors.New("not refused")
}

func (f *failingStore) fired() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.slots)
}

// TestSchedulerRetries: an enqueue that fails is logged, reported to the
// loop and tried again after the backoff; the scheduler enqueues nothing
// once stopped.
func TestSchedulerRetries(t *testing.T) {
	cfg, err := config.Parse("pepsi.conf", []byte("[stage-a]\nPROGRAM = a\n[schedule-s]\nEVERY = 1\nSTAGE = a\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{fails: 3}
	logs := &testkit.Buffer{}
	reports := make(chan serviceReport, 10)
	s := &scheduler{store: store, schedules: cfg.Schedules, log: slog.New(slog.NewTextHandler(logs, nil)), now: time.Now,
		retry: backoff{min: 10 * time.Millisecond, max: 50 * time.Millisecond}, report: reports}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, "two slots enqueued", time.Minute, func() bool { return len(store.fired()) >= 2 }, logs)
	s.Stop()
	n := len(store.fired())
	time.Sleep(1500 * time.Millisecond)
	if got := store.fired(); len(got) != n {
		t.Errorf("enqueued %v after Stop", got[n:])
	}
	if c := strings.Count(logs.String(), "database: schedule failed; retrying"); c != 3 {
		t.Errorf("%d failures logged, want 3:\n%s", c, logs)
	}
	if len(reports) != 3 {
		t.Errorf("%d failures reported to the loop, want 3", len(reports))
	}
	if got := store.fired(); !got[1].After(got[0]) {
		t.Errorf("slots %v: want each later than the last", got)
	}
	d, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if newScheduler(d, store) == nil {
		t.Error("a schedule: no scheduler")
	}
	d.cfg.Schedules = nil
	if newScheduler(d, store) != nil {
		t.Error("no schedules: want no scheduler")
	}
}

// TestSchedulerOneFails: a schedule whose enqueue fails with an error that
// is neither the database's (an outage) nor one of its values' (a skip)
// is tried again after the backoff, logged as its own, while the other
// schedules go on.
func TestSchedulerOneFails(t *testing.T) {
	cfg, err := config.Parse("pepsi.conf", []byte("[stage-a]\nPROGRAM = a\n[schedule-p]\nEVERY = 1\nSTAGE = a\n[schedule-q]\nEVERY = 1\nSTAGE = a\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{refused: "p", refusal: &pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for table schedule"}}
	logs := &testkit.Buffer{}
	reports := make(chan serviceReport)
	var reported atomic.Int64
	go func() {
		for range reports {
			reported.Add(1)
		}
	}()
	t.Cleanup(func() { close(reports) })
	s := &scheduler{store: store, schedules: cfg.Schedules, log: slog.New(slog.NewTextHandler(logs, nil)), now: time.Now,
		retry: backoff{min: 10 * time.Millisecond, max: 50 * time.Millisecond}, report: reports}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop) // before reports is closed
	testkit.Wait(t, "three of q's slots", time.Minute, func() bool { return len(store.fired()) >= 3 }, logs)
	s.Stop()
	if c := strings.Count(logs.String(), `msg="schedule p: enqueue failed; retrying" err="ERROR: permission denied for table schedule (SQLSTATE 42501)"`); c < 3 {
		t.Errorf("%d of p's failures logged as p's, want some:\n%s", c, logs)
	}
	if strings.Contains(logs.String(), "database: schedule") {
		t.Errorf("p's failure is logged as the database's:\n%s", logs)
	}
	if reported.Load() < 3 {
		t.Errorf("%d failures reported to the loop", reported.Load())
	}
}
