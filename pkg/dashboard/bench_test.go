package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkPages times the dashboard's pages over HTTP, rendering
// included, on a day's worth of $PEPSI_DASHBOARD_ROWS messages (default
// 1 000 000; 5 000 000 is issue 54's size): three stages, 94 % done, 2 %
// failed with four reasons, 2.5 % pending, 1 % paused and 0.5 % running,
// enqueued evenly over the last 24 h and each last changed then, loaded by
// INSERT … SELECT generate_series (a million rows in about 15 s). Every
// page is timed twice: first with the tables never analyzed nor vacuumed
// (autovacuum off for them: the statistics pepsi's janitor keeps are not
// there yet), then after VACUUM ANALYZE; each against its target (issue
// 54): the overview 20 ms, a search (header, payload text, error text)
// 200 ms, any other page 50 ms. overview/counting forgets the counts
// before each request: the first page after the httpd was idle (see
// idle-httpd) or started, which starts a count of the queue and waits
// for it countWait at most; overview/counts-in is how long that count took
// to come in (the next page is timed after it). idle-httpd is
// what the sampler of an httpd nobody looks at costs the database, in
// CPU-seconds a minute (its backends' CPU time, from /proc when the server
// runs on this host; target 0.1), beside watched-httpd, the same while
// someone looks (it counts the queue; the CPU of parallel workers is not
// in the figure, the wall time is).
//
//	make bench-go PKGS=./pkg/dashboard/ BENCH=Pages BENCHTIME=5x
//	PEPSI_DASHBOARD_ROWS=5000000 make bench-go PKGS=./pkg/dashboard/ BENCH=Pages BENCHTIME=5x
func BenchmarkPages(b *testing.B) {
	rows := 1_000_000
	if s := os.Getenv("PEPSI_DASHBOARD_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			b.Fatalf("PEPSI_DASHBOARD_ROWS=%q: want a number of at least 1000", s)
		}
		rows = n
	}
	s := newSite(b, siteOptions{stages: []string{"parse", "enrich", "deliver"}, countWait: true})
	start := time.Now()
	loadDay(b, s, rows)
	b.Logf("%d messages in %v", rows, time.Since(start).Round(time.Second))
	// The failure groups' deltas the load wrote, folded and their dead
	// rows vacuumed, as the janitor's vacuum check would within two
	// VACUUM_INTERVALs.
	s.exec(`SELECT pepsi.fold_failures()`)
	s.exec(`VACUUM pepsi.failure_delta`)

	mid := strconv.Itoa(rows/2 + 190) // a failed message
	recent := strconv.Itoa(rows - 1000)
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"overview/counting", "/"},
		{"failures", "/failures"},
		{"schedules", "/schedules"},
		{"messages", "/messages"},
		{"messages/deep", "/messages?before=" + strconv.Itoa(rows/100)},
		{"messages/failed", "/messages?status=failed"},
		{"messages/failed-at-stage", "/messages?status=failed&stage=parse"},
		{"messages/group", "/messages?status=failed&stage=enrich&reason=" + "upstream+N+after+Ns"},
		{"messages/done-at-stage-deep", "/messages?status=done&stage=parse&before=" + strconv.Itoa(rows/100)},
		{"messages/nothing-matches", "/messages?status=done&stage=nowhere"},
		{"message", "/messages/" + mid},
		{"search/header-none", "/messages?header=source%3Dnobody"},
		{"search/header-all", "/messages?header=source%3Dshop"},
		{"search/header-few", "/messages?header=tenant%3Dt7"},
		{"search/header-failed", "/messages?status=failed&header=tenant%3Dt7"},
		{"search/payload-none", "/messages?payload=no+such+text"},
		{"search/payload-one", "/messages?payload=%22order%22%3A" + recent + "%2C"},
		{"search/payload-failed", "/messages?status=failed&payload=%22sku%22"},
		{"search/payload-week", "/messages?payload=no+such+text&since=7d"},
		{"search/error-none", "/messages?q=no+such+text"},
		{"search/error-few", "/messages?q=sku+A-12+unknown"},
		{"search/error-in-failed", "/messages?status=failed&q=no+such+text"},
	}
	var table []string
	run := func(phase string) {
		for _, page := range pages {
			target := 50.0
			switch {
			case page.name == "overview":
				target = 20
			case strings.HasPrefix(page.name, "search/"):
				target = 200
			}
			var countsIn time.Duration // overview/counting's counts, in the background
			b.Run(phase+"/"+page.name, func(b *testing.B) {
				countsIn = 0
				get := func() {
					if page.name == "overview/counting" {
						s.dash.ForgetCounts()
					}
					start := time.Now()
					if r := s.do("GET", page.path, nil, req{}); r.code != http.StatusOK {
						b.Fatalf("GET %s: %d\n%s", page.path, r.code, r.body)
					}
					if page.name == "overview/counting" {
						// The count the page started goes on without it:
						// its time is a figure of its own, and the next
						// page is not timed beside it.
						b.StopTimer()
						if err := s.dash.CountsIn(context.Background()); err != nil {
							b.Fatal(err)
						}
						countsIn += time.Since(start)
						b.StartTimer()
					}
				}
				get() // warm, and the count it started in
				if err := s.dash.CountsIn(context.Background()); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					get()
				}
				ms := float64(b.Elapsed().Microseconds()) / float64(b.N) / 1000
				b.ReportMetric(ms, "ms/page")
				b.ReportMetric(target, "target-ms")
				table = append(table, verdict(phase+"/"+page.name, ms, target, "ms"))
				if countsIn > 0 {
					in := float64(countsIn.Microseconds()) / float64(b.N+1) / 1000
					b.ReportMetric(in, "ms/counts-in")
					table = append(table, fmt.Sprintf("%-40s %8.3f ms (no target: the page's count, in the background, until in)", phase+"/overview/counts-in", in))
				}
			})
		}
		for _, watched := range []bool{false, true} {
			name := map[bool]string{false: "idle-httpd", true: "watched-httpd"}[watched]
			b.Run(phase+"/"+name, func(b *testing.B) {
				cpu, wall := sampleCost(b, s, watched)
				b.ReportMetric(cpu, "db-cpu-s/min")
				b.ReportMetric(wall, "db-wall-s/min")
				b.ReportMetric(0.1, "target-cpu-s/min")
				if !watched {
					table = append(table, verdict(phase+"/"+name, cpu, 0.1, "CPU-s/min"))
				} else {
					table = append(table, fmt.Sprintf("%-40s %8.3f CPU-s/min (no target: someone looks; wall %.3f s/min)", phase+"/"+name, cpu, wall))
				}
			})
		}
	}
	run("nostats")
	s.exec(`VACUUM ANALYZE pepsi.state`)
	s.exec(`VACUUM ANALYZE pepsi.message`)
	run("stats")
	// On stdout: the log of a benchmark with sub-benchmarks is not shown.
	fmt.Printf("%d messages, each figure beside its target:\n%s\n", rows, strings.Join(table, "\n"))
}

// verdict is one line of the benchmark's table: the figure, its target and
// whether it is within it.
func verdict(name string, got, target float64, unit string) string {
	ok := "ok"
	if got > target {
		ok = "OVER"
	}
	return fmt.Sprintf("%-40s %8.3f %s  target ≤ %g  %s", name, got, unit, target, ok)
}

// loadDay fills s's queue with rows messages enqueued evenly over the last
// day (see BenchmarkPages), the tables' autovacuum off, neither analyzed
// nor vacuumed.
func loadDay(b *testing.B, s *site, rows int) {
	b.Helper()
	s.exec(`DO $$ DECLARE r record; BEGIN
	          FOR r IN SELECT relname FROM pg_class WHERE relnamespace = 'pepsi'::regnamespace AND relkind = 'r' LOOP
	              EXECUTE format('ALTER TABLE pepsi.%I SET (autovacuum_enabled = false)', r.relname);
	          END LOOP; END $$`)
	s.exec(`INSERT INTO pepsi.message (id, created_at, headers, payload)
	        SELECT g, now() - ($1 - g) * (86400.0 / $1) * interval '1 second',
	               jsonb_build_object('source', 'shop', 'tenant', 't' || (g % 97)),
	               convert_to('{"order":' || g || ',"sku":"A-' || (g % 977) || '"}', 'UTF8')
	          FROM generate_series(1, $1::bigint) g`, rows)
	s.exec(`INSERT INTO pepsi.state (id, stage, status, timeout, attempts, error, updated_at)
	        SELECT g, (ARRAY['parse', 'enrich', 'deliver'])[1 + g % 3],
	               CASE WHEN g % 200 < 188 THEN 'done' WHEN g % 200 < 192 THEN 'failed' WHEN g % 200 < 197 THEN 'pending'
	                    WHEN g % 200 < 199 THEN 'paused' ELSE 'running' END,
	               CASE WHEN g % 200 BETWEEN 197 AND 198 THEN now() + interval '10 minutes' END,
	               g % 3,
	               CASE WHEN g % 200 BETWEEN 188 AND 191 THEN (ARRAY['parse error at byte ' || (g % 5000), 'sku A-' || (g % 977) || ' unknown',
	                       'upstream 503 after 30s', 'exit status 1'])[1 + g % 4] END,
	               now() - ($1 - g) * (86400.0 / $1) * interval '1 second'
	          FROM generate_series(1, $1::bigint) g`, rows)
	s.exec(`SELECT setval('pepsi.message_id_seq', $1)`, rows)
}

// sampleCost is what the dashboard's sampler costs the database a minute
// (12 samples, one every 5 s), idle (no page asked for) or watched: the
// CPU time of the database's backends for this database, read from /proc
// (0 when the server is not on this host), and the samples' wall time.
func sampleCost(b *testing.B, s *site, watched bool) (cpuPerMin, wallPerMin float64) {
	b.Helper()
	const n = 24 // two minutes' worth
	backendCPU := func() float64 {
		rows, err := s.conn.Query(ctx(b), `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		var total float64
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				b.Fatal(err)
			}
			total += procCPU(pid)
		}
		return total
	}
	var cpu, wall float64
	for b.Loop() {
		if watched {
			s.get("/failures", http.StatusOK, req{})
		} else {
			s.dash.Unwatch()
		}
		before, t0 := backendCPU(), time.Now()
		for i := range n {
			if err := s.dash.SampleNow(context.Background(), i%6 == 0); err != nil {
				b.Fatal(err)
			}
		}
		wall += time.Since(t0).Seconds()
		cpu += backendCPU() - before
	}
	minutes := float64(b.N) * n / 12
	return cpu / minutes, wall / minutes
}

// procCPU is a process's CPU time (user and system) in seconds, from
// /proc; 0 when it cannot be read.
func procCPU(pid int) float64 {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
