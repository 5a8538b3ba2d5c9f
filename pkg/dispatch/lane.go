package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// lane is a queue goroutine and the job it has in flight. Every statement
// the dispatcher runs after start-up runs on a lane; the loop only starts
// jobs and applies their results, so a stalled or unreachable database
// never stalls it.
//
// The claim lane writes the wake flag, resumes due paused rows and
// claims; the settle lane settles answers; the chore lane sweeps orphans
// and expired rows and writes the statistics. Each runs on a connection
// and so a server backend of its own: a claim takes pending rows, a
// settle running ones, and while the database settles one batch it claims
// the next instead of waiting for it.
type lane struct {
	jobs chan *job
	job  *job // in flight, if any
	buf  job
}

// job is one piece of queue work handed to a lane, and its result.
type job struct {
	lane *lane
	err  error

	// Claim and settle lanes: one round trip.
	turn  queue.Turn
	res   queue.TurnResult
	gen   uint64    // claims: wakeGen when it was started
	marks uint64    // claims: marks when it was started
	pause time.Time // claims with Resume: the earliest pause a settle reported meanwhile

	// Chore lane.
	chore chore
}

// opTimeout bounds one queue job. Jobs do not run under the dispatcher's
// context: a stop must not cancel a claim or settle half-way, leaving rows
// changed that the loop does not know of. Only a stop that gives up on the
// database cancels them.
const opTimeout = 30 * time.Second

// run executes l's jobs on db one at a time until its channel is closed,
// and reports each to results. ctx is cancelled only when the dispatcher
// gives up on the database.
func (l *lane) run(ctx context.Context, db *queue.DB, results chan<- *job) {
	for j := range l.jobs {
		jctx, cancel := context.WithTimeout(ctx, opTimeout)
		if j.chore.want != 0 {
			j.err = j.chore.run(jctx, db)
		} else {
			j.err = db.RunTurn(jctx, j.turn, &j.res)
		}
		cancel()
		if queue.IsReadOnly(j.err) {
			// A demoted primary: drop every connection so that the next
			// ones find the new primary.
			db.Reset()
		}
		results <- j
	}
}

// lanes lists the dispatcher's lanes.
func (d *Dispatcher) lanes() []*lane { return []*lane{&d.claimer, &d.settler, &d.chores} }

// busy reports whether a lane has a job in flight.
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

// finishJob applies a job's result.
func (d *Dispatcher) finishJob(j *job, now time.Time) {
	j.lane.job = nil
	switch j.lane {
	case &d.settler:
		d.finishSettle(j, now)
	case &d.chores:
		d.finishChore(j, now)
	default:
		d.finishClaim(j, now)
	}
}
