package dispatch

import (
	"errors"
	"os/exec"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// outage is what the dispatcher knows of a database outage: a pass lost
// because the database was unreachable is not its message's fault, so the
// message goes back (queue.NotRun, paused for protocol.NotRunDelay)
// without counting against it, whatever RETRIES says.
type outage struct {
	failing bool               // a statement failed and none has succeeded since
	crashes map[int64]struct{} // heads of crashed workers whose verdict is not settled yet
}

// notRunDelay is protocol.NotRunDelay as a duration.
const notRunDelay = time.Duration(protocol.NotRunDelay * float64(time.Second))

// notRun is the verdict of a pass its stage could not run.
func notRun(h pass, stage string) queue.Settle {
	v := h.settle(stage, queue.NotRun)
	v.Delay = notRunDelay
	return v
}

// crashHead books the head message of a crashed worker: failed, unless the
// database is failing now, or fails the settle that would fail it.
func (d *Dispatcher) crashHead(p *pool, h pass, pid int, reason string) {
	if d.outage.failing {
		d.plan.verdict(notRun(h, p.cfg.Name))
		return
	}
	if d.outage.crashes == nil {
		d.outage.crashes = make(map[int64]struct{})
	}
	d.outage.crashes[h.id] = struct{}{}
	d.failedPass(p, h, queue.FailCrash, pid, reason)
}

// dbDown notes that a statement failed for want of the database: the
// crashes whose verdicts wait to be settled died with it, so their
// messages go back.
func (d *Dispatcher) dbDown() {
	d.outage.failing = true
	if len(d.outage.crashes) == 0 {
		return
	}
	d.plan.notRunCrashes(d.outage.crashes)
	// The others are in a settle in flight: they are converted if it
	// fails too, forgotten by dbUp if it goes through.
}

// dbUp notes that a statement succeeded: the settled crashes are decided.
func (d *Dispatcher) dbUp(settled []queue.Settle) {
	d.outage.failing = false
	for _, s := range settled {
		delete(d.outage.crashes, s.ID)
	}
}

// exitCode is the exit status err reports, -1 for none (killed by a
// signal, or not an exit error) and 0 for nil.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
