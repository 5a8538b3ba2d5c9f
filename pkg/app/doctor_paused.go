package app

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// doctorPausedFlags are the paused check's thresholds, as options.
func doctorPausedFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "paused-threshold", Value: fmtWait(admin.PausedLong),
			Usage: "warn of a stage paused (pepsi queue pause) for longer than `DURATION`"},
		&cli.StringFlag{Name: "paused-backlog", Value: strconv.Itoa(admin.PausedPileUp),
			Usage: "warn of a paused stage once `N` messages have reached it since its pause began"},
	}
}

// parsePausedFlags reads --paused-threshold and --paused-backlog into o.
func parsePausedFlags(c *cli.Context, o *doctorOptions) error {
	long, err := parseAge("paused-threshold", c.String("paused-threshold"))
	if err != nil {
		return err
	}
	if long == 0 {
		return usage("--paused-threshold %q: want a duration above 0", c.String("paused-threshold"))
	}
	s := c.String("paused-backlog")
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return usage("--paused-backlog %q: want a positive integer", s)
	}
	o.pausedLong, o.pausedPileUp = long, n
	return nil
}

// checkPaused lists the paused stages (admin.Health.PausedStates): who
// paused each, when and why, and how many messages wait there. It warns
// of a pause older than --paused-threshold, or at which --paused-backlog
// messages or more have arrived since it began, with the command that
// resumes it: nothing ends a pause by itself.
func checkPaused(d *doctor) doctorResult {
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	states := h.PausedStates()
	if len(states) == 0 {
		return ok("no stage is paused", nil)
	}
	long, pile := h.PausedThresholds()
	var parts, resume []string
	warns := false
	for _, p := range states {
		part := fmt.Sprintf("stage %s %s; %s pending there, %s arrived since the pause",
			p.Stage, pauseText(p.StagePause, h.Now), groupDigits(p.Pending), groupDigits(p.Arrived))
		var why []string
		if p.Long {
			why = append(why, "paused for longer than "+fmtWait(long))
		}
		if p.PilesUp {
			why = append(why, fmt.Sprintf("piling up: %s or more", groupDigits(pile)))
		}
		if len(why) > 0 {
			warns = true
			part += " (" + strings.Join(why, ", ") + ")"
			resume = append(resume, "pepsi queue resume --stage "+p.Stage)
		}
		parts = append(parts, part)
	}
	msg := strings.Join(parts, "; ")
	if !warns {
		return ok(msg+fmt.Sprintf(" (warns once paused for longer than %s, or once %s have arrived since)", fmtWait(long), groupDigits(pile)), states)
	}
	return warn(msg, "nothing ends a pause by itself: once the stage may run again, "+strings.Join(resume, "; ")).with(states)
}
