package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
)

// joinSweepEvery is how often the janitor looks for joins that are due
// and were not settled.
const joinSweepEvery = 5 * time.Second

// joinSweep is the janitor's sweep of joins. A child's end releases its
// parent's join in the settle that books it, in one transaction, and a
// parent a stage moved to its join itself is settled with the next
// settle; what neither saw (a dispatcher killed between that settle and
// the next, a parent that reached its join as its last child was
// cancelled from SQL) is found here, at start and every joinSweepEvery,
// with the JOIN_POLICY of every stage (see queue.SweepJoins).
type joinSweep struct {
	startStop
	store  joinStore
	log    *slog.Logger
	all    []string // the stages whose JOIN_POLICY is all
	report chan<- serviceReport
}

// newJoinSweep is d's join sweep on db.
func newJoinSweep(d *Dispatcher, db joinStore) *joinSweep {
	j := &joinSweep{store: db, log: d.log, all: []string{}, report: d.reports}
	for _, st := range d.cfg.Stages {
		if st.JoinPolicy == config.JoinAll {
			j.all = append(j.all, st.Name)
		}
	}
	return j
}

// Start sweeps at once and then every joinSweepEvery until Stop.
func (j *joinSweep) Start(ctx context.Context) error {
	j.start(ctx, j.run)
	return nil
}

func (j *joinSweep) run(_, stop context.Context) {
	t := time.NewTicker(joinSweepEvery)
	defer t.Stop()
	failing := false
	for {
		joined, err := j.store.SweepJoins(stop, j.all)
		switch {
		case err != nil && stop.Err() == nil && !failing:
			j.log.Warn("join sweep failed; retrying at the next interval", "err", err)
		case len(joined) > 0:
			j.log.Info("join sweep: settled joins that no settle had", "parents", len(joined), "first", joined[0].ID)
			select {
			case j.report <- serviceReport{joined: joined}:
			case <-stop.Done():
				return
			}
		}
		failing = err != nil
		select {
		case <-stop.Done():
			return
		case <-t.C:
		}
	}
}
