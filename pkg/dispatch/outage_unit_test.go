package dispatch

import (
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestOutageVerdicts: a crash's head fails while the database answers; it
// goes back (NotRun, delayed) when the database is failing at the crash,
// when a failure comes before its verdict is settled (buffered, or in a
// settle in flight that fails too), and not once its settle went through.
func TestOutageVerdicts(t *testing.T) {
	p := &pool{cfg: config.Stage{Name: "s"}, retry: queue.RetryPolicy{Retries: 3}}
	d := &Dispatcher{}
	d.plan = newPlanner(nil, "*")
	verdict := func(id int64) queue.Verdict {
		t.Helper()
		for _, s := range d.plan.settles {
			if s.ID == id {
				return s.Verdict
			}
		}
		t.Fatalf("no verdict for %d in %+v", id, d.plan.settles)
		return ""
	}

	d.crashHead(p, pass{id: 1}, 0, "worker crashed: exit status 3")
	if v := verdict(1); v != queue.PassFailed {
		t.Errorf("a crash with the database up: %s, want %s", v, queue.PassFailed)
	}
	d.dbDown() // its settle failed: the outage took it
	if v := verdict(1); v != queue.NotRun || d.plan.settles[0].Delay != notRunDelay {
		t.Errorf("after the settle failed: %+v, want NotRun after %v", d.plan.settles[0], notRunDelay)
	}
	d.crashHead(p, pass{id: 2}, 0, "worker crashed: exit status 1")
	if v := verdict(2); v != queue.NotRun {
		t.Errorf("a crash while the database fails: %s, want NotRun", v)
	}

	// Up again: a crash whose settle goes out before the next failure.
	d.dbUp(d.plan.settles)
	d.plan.settles = nil
	d.crashHead(p, pass{id: 3}, 0, "worker crashed")
	inFlight := d.plan.settles
	d.plan.settles = nil
	d.crashHead(p, pass{id: 4}, 0, "worker crashed")
	d.dbUp(inFlight) // 3 settled
	d.dbDown()
	if v := verdict(4); v != queue.NotRun {
		t.Errorf("a buffered crash at the failure: %s, want NotRun", v)
	}
	if _, ok := d.outage.crashes[3]; ok {
		t.Error("a settled crash is still remembered")
	}

	// A crash in a settle in flight when another statement fails: still
	// converted when that settle fails and comes back.
	d.dbUp(nil)
	d.plan.settles = nil
	d.crashHead(p, pass{id: 5}, 0, "worker crashed")
	inFlight = d.plan.settles
	d.plan.settles = nil
	d.dbDown() // the claim failed first
	d.plan.settles = append(inFlight, d.plan.settles...)
	d.dbDown() // then the settle
	if v := verdict(5); v != queue.NotRun {
		t.Errorf("a crash in a settle in flight: %s, want NotRun", v)
	}
}
