package dispatch

import (
	"time"
)

// A stage that answers 75 (protocol.NotRun) did not run its message: the
// message goes back, paused a second, and the pass counts neither as an
// attempt nor as processed or failed. So that a stage answering 75 for
// ever is seen, each such answer is counted (StageStats.NotRun), its
// reason is the message's dispatch_error (carried by its settle, no
// statement of its own), and a log line says so, at most one per stage
// every notRunLogGap, with the count since the last.

// notRunLogGap is the least time between two log lines of one stage's
// answers 75.
const notRunLogGap = time.Minute

// notRunLog is what a stage's answers 75 have logged.
type notRunLog struct {
	at    time.Time // the last line; zero: none yet
	count int64     // answers 75 since
}

// notRunAnswer books stage p's answer 75 for message id, with the free
// text of its status line.
func (d *Dispatcher) notRunAnswer(p *pool, h pass, text string, now time.Time) {
	reason := "stage " + p.cfg.Name + " answered 75: not run, not counted as an attempt"
	if text != "" {
		reason += ": " + text
	}
	d.notRunBooked(p, h, reason, now)
}

// notRunExit books the head message id of stage p's worker that exited 75.
func (d *Dispatcher) notRunExit(p *pool, h pass, now time.Time) {
	d.notRunBooked(p, h, "stage "+p.cfg.Name+"'s worker exited 75 with it outstanding: not run, not counted as an attempt", now)
}

// notRunBooked puts message id of stage p back (notRun) with reason,
// counts it, and logs it unless the stage logged one within notRunLogGap.
func (d *Dispatcher) notRunBooked(p *pool, h pass, reason string, now time.Time) {
	v := notRun(h, p.cfg.Name)
	v.Reason = reason
	d.plan.verdict(v)
	d.tally.stage(p.cfg.Name).NotRun++
	d.obs.Passed(p.cfg.Name, ResultNotRun, 0) // no pass: no busy time, as in the statistics
	l := &p.notRun
	l.count++
	if !l.at.IsZero() && now.Sub(l.at) < notRunLogGap {
		return
	}
	args := []any{"stage", p.cfg.Name, "id", h.id, "reason", reason, "answers", l.count}
	if !l.at.IsZero() {
		args = append(args, "since", now.Sub(l.at).Round(time.Second))
	}
	d.log.Info("stage answered 75: message not run, tried again in a second "+
		"(a stage that answers 75 to every message cannot reach its database)", args...)
	l.at, l.count = now, 0
}
