package app

import (
	"fmt"
	"strings"
)

// checkNotRun warns of the stages whose recent answers were mostly 75
// (admin.Health.NotRun): their messages go back and are tried again every
// second, with no attempt counted, for ever if the stage never runs them.
func checkNotRun(d *doctor) doctorResult {
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	interval, stages := d.cfg.Dispatch.StatsInterval, h.NotRun
	if len(stages) == 0 {
		return ok("no stage answered mostly 75 (not run) in the statistics of the last "+fmtWait(2*interval), nil)
	}
	parts := make([]string, 0, len(stages))
	for _, a := range stages {
		parts = append(parts, fmt.Sprintf("stage %s answered 75 (not run) in %s of its last %s",
			a.Stage, groupDigits(a.NotRun), plural(a.NotRun+a.Passes, "answer")))
	}
	return warn(strings.Join(parts, "; ")+": those messages go back and are tried again every second, with no attempt counted",
		"see why in their dispatch_error (pepsi queue ls --stage STAGE --status paused) and the stage's log; a stage should answer 75 only when it cannot reach its database").with(stages)
}
