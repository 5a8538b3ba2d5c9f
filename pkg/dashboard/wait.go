package dashboard

import (
	"strconv"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// A paused message waits for its timeout for one of two reasons, which
// the pages keep apart (issue 54): it was scheduled (pepsi enqueue --at or
// --delay, a producer's run_at) and has never run, or a pass of it failed
// (or answered 75) and it waits to be tried again.

// Kinds of a paused message's wait.
const (
	waitScheduled = "scheduled" // enqueued for a later time, never run yet
	waitRetry     = "retry"     // a pass failed or was not run: tried again then
)

// waitOf is why r waits: waitScheduled, waitRetry, or "" when it is not
// paused. A message that has made no attempt and carries no error is
// scheduled; any other paused message waits for a retry.
func waitOf(r admin.Row) string {
	if r.Status != queue.Paused {
		return ""
	}
	if r.Attempts == 0 && r.Error == nil && r.DispatchError == nil {
		return waitScheduled
	}
	return waitRetry
}

// spanFine writes d in its two largest units, the second left out when
// it is zero: "45 s", "12 min", "1 h 47 min", "3 d 4 h" (span rounds to
// one unit: a message due in 1 h 47 min is not due "in 1 h").
func spanFine(d time.Duration) string {
	d = max(d, 0)
	two := func(a int64, ua string, b int64, ub string) string {
		s := strconv.FormatInt(a, 10) + " " + ua
		if b > 0 {
			s += " " + strconv.FormatInt(b, 10) + " " + ub
		}
		return s
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + " s"
	case d < 10*time.Minute:
		return two(int64(d/time.Minute), "min", int64(d%time.Minute/time.Second), "s")
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		return two(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "min")
	}
	return two(int64(d/(24*time.Hour)), "d", int64(d%(24*time.Hour)/time.Hour), "h")
}
