package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// lane is a turn goroutine and the turn it has in flight. The loop runs
// no statement itself: it starts jobs on the lanes (turns here, chores on
// the chore lane) and applies their results, so a stalled or unreachable
// database never stalls it.
//
// The claim lane writes the wake flag, resumes due paused rows, admits
// and claims; the settle lane settles answers, with the claim of the
// stages whose keys they free (settleclaim.go). Each runs on a connection
// and so a server backend of its own: a claim takes pending rows, a
// settle running ones, and while the database settles one batch it claims
// the next instead of waiting for it.
type lane struct {
	jobs chan *job
	job  *job // in flight, if any
	buf  job
	// traced: its claims read the trace context (queue.Turn.Traced);
	// set before it runs.
	traced bool
}

// job is a lane's job: one turn and its result (what the turn is for,
// the planner keeps).
type job struct {
	lane *lane
	err  error

	turn queue.Turn
	res  queue.TurnResult
}

// opTimeout bounds one piece of queue work (a turn, a chore, a retention
// batch). The lanes' jobs do not run under the dispatcher's context: a stop
// must not cancel a claim or settle half-way, leaving rows changed that
// the loop does not know of. Only a stop that gives up on the database
// cancels them.
const opTimeout = 30 * time.Second

// run executes l's turns on db one at a time until its channel is
// closed, and reports each to results. ctx is cancelled only when the
// dispatcher gives up on the database.
func (l *lane) run(ctx context.Context, db turnStore, results chan<- *job) {
	for j := range l.jobs {
		jctx, cancel := context.WithTimeout(ctx, opTimeout)
		j.turn.Traced = l.traced
		j.err = db.RunTurn(jctx, j.turn, &j.res)
		cancel()
		if queue.IsReadOnly(j.err) {
			// A demoted primary: drop every connection so that the next
			// ones find the new primary.
			db.Reset()
		}
		results <- j
	}
}

// lanes lists the dispatcher's turn lanes.
func (d *Dispatcher) lanes() []*lane { return []*lane{&d.claimer, &d.settler} }

// busy reports whether a lane or the chore lane has a job in flight.
func (d *Dispatcher) busy() bool {
	return d.claimer.job != nil || d.settler.job != nil || d.chores.job != nil
}

// startJobs hands the queue work gathered so far to the lanes that are
// free. The chores go first: an orphan sweep must start while no claim is
// in flight.
func (d *Dispatcher) startJobs(now time.Time) {
	d.startChore(now)
	d.startSettle(now)
	d.startClaim(now)
}

// finishJob applies a turn's result.
func (d *Dispatcher) finishJob(j *job, now time.Time) {
	j.lane.job = nil
	if j.lane == &d.settler {
		d.finishSettle(j, now)
		return
	}
	d.finishClaim(j, now)
}
