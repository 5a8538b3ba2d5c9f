package main

// The report at the end of a run.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// statuses are pepsi.state's, in the order the report prints them; any
// other a row has is printed after them.
var statuses = []string{"pending", "running", "paused", "held", "done", "failed", "cancelled"}

// stats are the dispatchers' global statistics, summed over the writers.
type stats struct {
	claimed, done, failed, paused, requeued, reset, cancelled, orphans, resumed int64
}

// settled is what the statistics identity adds up: every claim is settled
// once (pepsi-stats(1)).
func (g stats) settled() int64 {
	return g.done + g.failed + g.paused + g.requeued + g.reset + g.cancelled
}

func (s *soak) report(wall time.Duration, stalled bool) (int, error) {
	n := int64(*nFlag)
	var byStatus map[string]int64
	if err := json.Unmarshal([]byte(s.text(`SELECT coalesce(jsonb_object_agg(status, n), '{}')::text
		FROM (SELECT status::text, count(*) AS n FROM pepsi.state GROUP BY 1) c`)), &byStatus); err != nil {
		return 0, err
	}
	done, failed, running, cancelled := byStatus["done"], byStatus["failed"], byStatus["running"], byStatus["cancelled"]
	unexplained := s.query(`SELECT count(*) FROM pepsi.state WHERE status = 'failed'
		AND coalesce(dispatch_error, '') = '' AND coalesce(error, '') = ''`)
	noState := s.query("SELECT count(*) FROM pepsi.message m LEFT JOIN pepsi.state s USING (id) WHERE s.id IS NULL")
	lost := n - done - failed - cancelled
	twice := s.query("SELECT count(DISTINCT id) FROM (SELECT id FROM test_passes GROUP BY id, stage HAVING count(*) > 1) d")
	twiceOutside := s.query(`SELECT count(DISTINCT id) FROM (SELECT id FROM test_passes GROUP BY id, stage HAVING count(*) > 1) d
		WHERE NOT EXISTS (SELECT 1 FROM soak_inflight i WHERE i.id = d.id)`)
	inflight := s.query("SELECT count(*) FROM soak_inflight")
	passes := s.query("SELECT count(*) FROM test_passes")
	var g stats
	s.scan(`SELECT coalesce(sum(claimed), 0)::bigint, coalesce(sum(done), 0)::bigint, coalesce(sum(failed), 0)::bigint,
		coalesce(sum(paused), 0)::bigint, coalesce(sum(requeued), 0)::bigint, coalesce(sum(reset), 0)::bigint,
		coalesce(sum(cancelled), 0)::bigint, coalesce(sum(orphans), 0)::bigint, coalesce(sum(resumed), 0)::bigint
		FROM pepsi.dispatch_stats`, &g.claimed, &g.done, &g.failed, &g.paused, &g.requeued, &g.reset, &g.cancelled, &g.orphans, &g.resumed)
	timeouts := s.query("SELECT coalesce(sum(timeouts), 0) FROM pepsi.stage_stats")
	crashes := s.query("SELECT coalesce(sum(crashes), 0) FROM pepsi.stage_stats")
	workers := s.query("SELECT count(*) FROM test_workers")
	exact := g.claimed == g.settled()
	// A dispatcher killed outright loses the counts it had not written
	// (pepsi-stats(1)): the identity is exact only without such kills.
	killed := s.injected[dispatcherKill] + s.injected[standbyTakeover]

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "pepsi soak: %d messages × 3 stages (PARALLELISM %d, QUEUE_LIMIT %d per stage), %d faults scheduled (%d kinds in turn)\n\n",
		n, *parallelism, *queueLimit, s.faults, len(s.kinds))
	fmt.Fprintf(w, "fault\tinjected\n")
	for _, k := range s.kinds {
		fmt.Fprintf(w, "%s\t%d\n", k, s.injected[k])
	}
	for _, f := range payloadFaults {
		fmt.Fprintf(w, "%s\t%d messages\n", f.kind, s.injected[f.kind])
	}
	fmt.Fprintf(w, "(seen by the dispatchers: timeouts\t%d, crashes %d, workers started %d, left running by killed dispatchers %d)\n",
		timeouts, crashes, workers, s.orphans)

	if s.cluster != nil {
		fmt.Fprintf(w, "(the private cluster: %s)\n", s.cluster.summary())
	}

	fmt.Fprintf(w, "\nmessages by status\t\n")
	for _, st := range statuses {
		fmt.Fprintf(w, "%s\t%d\n", st, byStatus[st])
	}
	var others []string
	for st := range byStatus {
		if !slices.Contains(statuses, st) {
			others = append(others, st)
		}
	}
	slices.Sort(others)
	for _, st := range others {
		fmt.Fprintf(w, "%s\t%d\n", st, byStatus[st])
	}
	fmt.Fprintf(w, "\nlost (not done, failed or cancelled)\t%d (%d without a state row)\n", lost, noState)
	fmt.Fprintf(w, "left running\t%d\n", running)
	fmt.Fprintf(w, "failed without a reason\t%d\n", unexplained)
	fmt.Fprintf(w, "moved twice by passes of one message\t%d (%d not in flight at a fault; %d messages were in flight at one)\n", twice, twiceOutside, inflight)
	fmt.Fprintf(w, "stage passes\t%d\n", passes)

	fmt.Fprintf(w, "\nstatistics (pepsi.dispatch_stats)\t\n")
	fmt.Fprintf(w, "claimed\t%d\n", g.claimed)
	fmt.Fprintf(w, "settled: done + failed + paused + requeued + reset + cancelled\t%d = %d + %d + %d + %d + %d + %d\n",
		g.settled(), g.done, g.failed, g.paused, g.requeued, g.reset, g.cancelled)
	fmt.Fprintf(w, "claimed - settled\t%d\n", g.claimed-g.settled())
	fmt.Fprintf(w, "(not in the identity: orphans\t%d, resumed %d; rows done / failed ahead of the statistics by %d / %d)\n",
		g.orphans, g.resumed, done-g.done, failed-g.failed)
	fmt.Fprintf(w, "\nwall time\t%s (%.0f messages/s, %.0f stage passes/s)\n", wall.Round(time.Second),
		float64(done+failed)/wall.Seconds(), float64(passes)/wall.Seconds())
	w.Flush()
	fmt.Printf("statistics exact: %s (claimed %d, settled %d)\n", yesNo(exact), g.claimed, g.settled())
	if !exact && killed > 0 {
		fmt.Printf("  (%d dispatchers were killed outright: each lost the counts it had not written, up to STATS_INTERVAL; pepsi-stats(1))\n", killed)
	}
	if len(s.notes) > 0 {
		fmt.Println("\nnotes:")
		for _, m := range s.notes {
			fmt.Println("  " + m)
		}
	}
	if failed > 0 {
		s.failureSummary()
	}
	if twice > 0 {
		fmt.Println("\nmoved twice (the first 20):")
		fmt.Println(s.text(movedTwiceSQL))
	}
	if lost > 0 || running > 0 || unexplained > 0 || twiceOutside > 0 || noState > 0 || (!exact && killed == 0) || stalled {
		return 1, nil
	}
	return 0, nil
}

// movedTwiceSQL describes the first 20 messages moved twice at a stage:
// their passes, and the fault injected last before the last of them.
const movedTwiceSQL = `
WITH d AS (SELECT id, stage, count(*) AS n, min(at) AS first, max(at) AS last, string_agg(pid::text, ',' ORDER BY at) AS pids
             FROM test_passes GROUP BY id, stage HAVING count(*) > 1 ORDER BY id LIMIT 20)
SELECT coalesce(string_agg(format('  message %s at %s: %s passes (pids %s) %s apart, the last %s after fault %s%s',
           d.id, d.stage, d.n, d.pids, d.last - d.first, d.last - f.at, coalesce(f.n || ' (' || f.kind || ')', 'none'),
           CASE WHEN i.id IS NULL THEN '' ELSE '; in flight at a fault' END), E'\n' ORDER BY d.id), '')
  FROM d LEFT JOIN LATERAL (SELECT n, kind, at FROM soak_faults f WHERE f.at <= d.last ORDER BY f.at DESC LIMIT 1) f ON true
         LEFT JOIN soak_inflight i ON i.id = d.id`

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// failureSummary prints the failure reasons by kind.
func (s *soak) failureSummary() {
	rows, err := s.conn.Query(s.ctx, `SELECT regexp_replace(coalesce(dispatch_error, error), '[0-9]+', 'N', 'g') AS r, count(*)
		FROM pepsi.state WHERE status = 'failed' GROUP BY r ORDER BY count(*) DESC LIMIT 10`)
	if err != nil {
		return
	}
	fmt.Println("\nfailure reasons:")
	out := bufio.NewWriter(os.Stdout)
	var reason string
	var count int64
	_, _ = pgx.ForEachRow(rows, []any{&reason, &count}, func() error {
		fmt.Fprintf(out, "  %7s  %s\n", strconv.FormatInt(count, 10), reason)
		return nil
	})
	out.Flush()
}
