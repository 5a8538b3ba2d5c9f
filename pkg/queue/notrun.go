package queue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotRunAnswers is a stage's answers in its statistics writers' latest
// writes that counted anything there: the answers 75 (not run) and the
// passes.
type NotRunAnswers struct {
	Stage  string    `json:"stage"`
	NotRun int64     `json:"not_run"`
	Passes int64     `json:"passes"`
	At     time.Time `json:"at"` // the latest of those writes
}

// MostlyNotRun reports whether most of the answers were 75: the stage
// cannot reach its database, or answers 75 for messages it will never
// run, which are then tried once a second for ever.
func (a *NotRunAnswers) MostlyNotRun() bool { return a.NotRun > 0 && a.NotRun > a.Passes }

// notRunSpans is how many STATS_INTERVALs back a write counts as recent:
// a dispatcher whose stage keeps answering writes its statistics at least
// once an interval.
const notRunSpans = 2

// NotRunStages returns the stages whose recent answers were mostly 75
// (NotRunAnswers.MostlyNotRun), by name: their statistics written within
// two statsInterval (the dispatchers' STATS_INTERVAL) of now. pepsi doctor
// and the dashboard warn of them.
func (db *DB) NotRunStages(ctx context.Context, statsInterval time.Duration) ([]NotRunAnswers, error) {
	rows, err := db.pool.Query(ctx, `SELECT stage, sum(recent_not_run)::bigint, sum(recent_passes)::bigint, max(updated_at)
		FROM pepsi.stage_stats WHERE updated_at > now() - make_interval(secs => $1)
		GROUP BY stage ORDER BY stage`, (notRunSpans * statsInterval).Seconds())
	if err != nil {
		return nil, err
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (NotRunAnswers, error) {
		var a NotRunAnswers
		err := r.Scan(&a.Stage, &a.NotRun, &a.Passes, &a.At)
		return a, err
	})
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for i := range all {
		if all[i].MostlyNotRun() {
			out = append(out, all[i])
		}
	}
	return out, nil
}
