package dashboard_test

import (
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// BenchmarkPages times the dashboard's pages over HTTP, rendering
// included, on a queue of $PEPSI_DASHBOARD_ROWS messages (default
// 1 000 000): three stages enqueued in interleaved batches with pkg/queue's
// bulk enqueue, then 85% done, 6% pending, 4% failed with four reasons, 3%
// paused and 2% running, as a busy pipeline's queue is, enqueued one a
// second and each last changed then (VACUUM ANALYZE after). The dashboard samples as pepsi httpd's does (every 5 s: the
// statistics, the counts of every status but done, and of done every
// 30 s), so the overview and the lists' totals use its counts, as they do
// in production; overview/counting forgets them before every request, so
// that the page counts the queue itself, as it does when the sampler has
// not (the first page after a start): the cost of a count. The search/
// pages search headers and payloads within their default day (86 400
// messages), or a week.
//
//	make bench-go PKGS=./pkg/dashboard/ BENCH=Pages BENCHTIME=20x
//
// Filling the database takes about half a minute.
func BenchmarkPages(b *testing.B) {
	rows := 1_000_000
	if s := os.Getenv("PEPSI_DASHBOARD_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			b.Fatalf("PEPSI_DASHBOARD_ROWS=%q: want a number of at least 1000", s)
		}
		rows = n
	}
	s := newSite(b, siteOptions{stages: []string{"parse", "enrich", "deliver"}})
	start := time.Now()
	const batch = 10000
	payloads := make([][]byte, batch)
	for i := range payloads {
		payloads[i] = []byte(`{"order":` + strconv.Itoa(i) + `,"sku":"A-` + strconv.Itoa(i%977) + `"}`)
	}
	stages := []string{"parse", "enrich", "deliver"}
	for n := 0; n < rows; n += batch {
		k := min(batch, rows-n)
		if _, err := s.db.EnqueueBulk(ctx(b), queue.Bulk{Stage: stages[n/batch%3], Headers: map[string]string{"source": "shop"}, Payloads: payloads[:k]}); err != nil {
			b.Fatal(err)
		}
	}
	s.exec(`UPDATE pepsi.state SET status = CASE
	           WHEN id % 100 < 85 THEN 'done' WHEN id % 100 < 91 THEN 'pending' WHEN id % 100 < 95 THEN 'failed'
	           WHEN id % 100 < 98 THEN 'paused' ELSE 'running' END,
	       error = CASE WHEN id % 100 BETWEEN 91 AND 94 THEN (ARRAY['parse error at byte ' || (id % 5000), 'sku A-' || (id % 977) || ' unknown',
	               'upstream 503 after 30s', 'exit status 1'])[1 + id % 4] END,
	       timeout = CASE WHEN id % 100 BETWEEN 95 AND 97 THEN now() + interval '10 minutes' END,
	       attempts = id % 3, updated_at = now() - ($1 - id) * interval '1 second'`, rows)
	// One message a second, the last now: a search's default day reads
	// the newest 86 400.
	s.exec(`UPDATE pepsi.message SET created_at = now() - ($1 - id) * interval '1 second'`, rows)
	s.exec(`VACUUM ANALYZE pepsi.state`)
	s.exec(`VACUUM ANALYZE pepsi.message`)
	b.Logf("%d messages in %v", rows, time.Since(start).Round(time.Second))

	mid := strconv.Itoa(rows/2 + 94) // a failed message
	for _, page := range []struct{ name, path string }{
		{"overview", "/"},
		{"overview/counting", "/"},
		{"failures", "/failures"},
		{"messages", "/messages"},
		{"messages/deep", "/messages?before=" + strconv.Itoa(rows/100)},
		{"messages/failed", "/messages?status=failed"},
		{"messages/failed-at-stage", "/messages?status=failed&stage=parse"},
		{"messages/group", "/messages?status=failed&stage=enrich&reason=" + "upstream+N+after+Ns"},
		{"messages/text-in-failed", "/messages?status=failed&q=no+such+text"},
		{"messages/done-at-stage-deep", "/messages?status=done&stage=parse&before=" + strconv.Itoa(rows/100)},
		{"messages/text-anywhere", "/messages?q=no+such+text"},
		{"messages/nothing-matches", "/messages?status=done&stage=nowhere"},
		{"message", "/messages/" + mid},
		{"search/header-none", "/messages?header=source%3Dnobody"},
		{"search/header-all", "/messages?header=source%3Dshop"},
		{"search/payload-none", "/messages?payload=no+such+text"},
		{"search/payload-few", "/messages?payload=%22order%22%3A1234%2C"},
		{"search/payload-failed", "/messages?status=failed&payload=%22sku%22"},
		{"search/payload-week", "/messages?payload=no+such+text&since=7d"},
	} {
		b.Run(page.name, func(b *testing.B) {
			get := func() {
				if page.name == "overview/counting" {
					s.dash.ForgetCounts()
				}
				if r := s.do("GET", page.path, nil, req{}); r.code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", page.path, r.code, r.body)
				}
			}
			get() // warm
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/page")
		})
	}
}
