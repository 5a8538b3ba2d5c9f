package dashboard

import (
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestFailedPasses: a stage's failed passes (failed answers, timeouts and
// crashes) and all its passes over the window, from the samples within it
// and the one before it; a counter that went down adds nothing; unknown
// with one sample.
func TestFailedPasses(t *testing.T) {
	s := newSampler(10*time.Minute, 10*time.Second)
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(min int, ok, failed, timeouts int64) {
		s.add(t0.Add(time.Duration(min)*time.Minute), []queue.StageStats{{Stage: "a", Processed: ok, Failed: failed, Timeouts: timeouts}})
	}
	if _, _, _, ok := s.failures("a", t0); ok {
		t.Error("known without samples")
	}
	at(0, 1000, 100, 0) // before the window
	if _, _, _, ok := s.failures("a", t0); ok {
		t.Error("known with one sample")
	}
	at(5, 1100, 100, 0) // the window starts at minute 2: this interval counts whole
	at(8, 1190, 108, 2) // 90 ok, 8 failed, 2 timeouts
	at(9, 50, 110, 2)   // a reset: 0 ok
	at(12, 150, 112, 2) // 100 ok, 2 failed
	f, p, spans, ok := s.failures("a", t0.Add(12*time.Minute))
	if !ok || f != 14 || p != 100+(90+10)+2+(100+2) || spans != 12*time.Minute {
		t.Errorf("failures: %d of %d over %v (%v), want 14 of 304 over 12m", f, p, spans, ok)
	}
	if f, p, _, _ := s.failures("other", t0.Add(12*time.Minute)); f != 0 || p != 0 {
		t.Errorf("a stage without statistics: %d of %d", f, p)
	}
}

// TestTrend: a backlog growing, draining (with when it would be empty),
// steady, empty, or unknown until 30 s of counts.
func TestTrend(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	c := newCountCache(15 * time.Minute)
	series := func(f func(sec int) int64) {
		for sec := -600; sec <= 0; sec += 10 {
			c.addBacklog(now.Add(time.Duration(sec)*time.Second), map[string]int64{"s": f(sec)})
		}
	}
	series(func(sec int) int64 { return 1000 - int64(sec+600)/10*5 }) // -30/min to 700
	tr := c.trend("s", 700, now)
	if tr.Trend != "draining" || tr.PerMinute > -29.9 || tr.PerMinute < -30.1 || tr.DrainsIn == nil || *tr.DrainsIn < 1399 || *tr.DrainsIn > 1401 || tr.Span != 300 {
		t.Errorf("draining: %+v (drains in %v)", tr, tr.DrainsIn)
	}
	c = newCountCache(15 * time.Minute)
	series(func(sec int) int64 { return 200 + int64(sec+600)/60 }) // +1/min
	if tr := c.trend("s", 210, now); tr.Trend != "growing" || tr.DrainsIn != nil {
		t.Errorf("growing: %+v", tr)
	}
	c = newCountCache(15 * time.Minute)
	series(func(sec int) int64 { return 5000 + int64(sec%20) }) // noise
	if tr := c.trend("s", 5000, now); tr.Trend != "steady" {
		t.Errorf("steady: %+v", tr)
	}
	if tr := c.trend("other", 0, now); tr.Trend != "empty" {
		t.Errorf("empty: %+v", tr)
	}
	c = newCountCache(15 * time.Minute)
	c.addBacklog(now.Add(-20*time.Second), map[string]int64{"s": 10})
	c.addBacklog(now.Add(-10*time.Second), map[string]int64{"s": 20})
	c.addBacklog(now, map[string]int64{"s": 30})
	if tr := c.trend("s", 30, now); tr.Trend != "unknown" {
		t.Errorf("20 s of counts: %+v", tr)
	}
	// The history keeps the window, no more.
	c.addBacklog(now.Add(time.Hour), map[string]int64{"s": 1})
	if len(c.history) != 1 {
		t.Errorf("%d counts kept an hour later", len(c.history))
	}
}

// TestStandbys: a dispatcher is missing its standby when none waits for
// its lock now and one was seen waiting before, within standbyMemory.
func TestStandbys(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	all := admin.DispatcherSession{ServerPID: 1, PID: 10, Host: "h", All: true}
	set := admin.DispatcherSession{ServerPID: 2, PID: 20, Host: "h", Stages: []string{"x", "y"}}
	waits := func(stage string, pid int32) admin.DispatcherSession {
		return admin.DispatcherSession{ServerPID: pid, PID: int(pid) * 10, Host: "h", WaitsFor: stage}
	}
	var s standbys
	s.note(admin.Dispatchers{Running: []admin.DispatcherSession{all}}, now)
	if l := s.lost(admin.Dispatchers{Running: []admin.DispatcherSession{all}}); len(l) != 0 {
		t.Errorf("never had a standby, and lost one: %+v", l)
	}
	both := admin.Dispatchers{Running: []admin.DispatcherSession{all, set}, Standbys: []admin.DispatcherSession{waits("", 3), waits("y", 4)}}
	s.note(both, now)
	if l := s.lost(both); len(l) != 0 {
		t.Errorf("both standbys wait, and one is lost: %+v", l)
	}
	later := now.Add(time.Hour)
	none := admin.Dispatchers{Running: []admin.DispatcherSession{all, set}}
	s.note(none, later)
	l := s.lost(none)
	if len(l) != 2 || l[0].Dispatcher.ServerPID != 1 || l[0].Standby.ServerPID != 3 || !l[0].LastSeen.Equal(now) ||
		l[1].Dispatcher.ServerPID != 2 || l[1].Standby.ServerPID != 4 {
		t.Errorf("both standbys gone: %+v", l)
	}
	// The standby that took over (the one of every stage) has none behind it.
	took := admin.Dispatchers{Running: []admin.DispatcherSession{{ServerPID: 3, PID: 30, Host: "h", All: true}}}
	if l := s.lost(took); len(l) != 1 || l[0].Standby.ServerPID != 3 {
		t.Errorf("after a takeover: %+v", l)
	}
	// A day later, forgotten.
	s.note(none, now.Add(standbyMemory+time.Minute))
	if l := s.lost(none); len(l) != 0 {
		t.Errorf("remembered after a day: %+v", l)
	}
}
