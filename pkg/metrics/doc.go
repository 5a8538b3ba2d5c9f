// Package metrics serves pepsi's Prometheus metrics, with
// github.com/prometheus/client_golang and a registry of its own (never the
// global one), in two places:
//
//   - Observer is the dispatcher's dispatch.Observer: it counts what the
//     dispatcher does (messages handed to workers, how long they waited,
//     pass results, busy time, pools, worker starts, reconnects, orphans,
//     health) and the queue's depth, and pepsi dispatch serves it when
//     METRICS_LISTEN is set.
//   - Stats is the standalone exporter behind pepsi httpd: the statistics
//     tables and the queue's depth, read on each scrape, exactly the
//     families pepsi stats --format prometheus prints.
//
// Server serves either on /metrics, with /healthz beside it.
//
// The queue's depth is counted when Prometheus scrapes, not on a timer:
// nothing runs when nobody scrapes, a scrape sees a count no older than
// MaxAge (default 5 s), and however many servers scrape, the database counts
// at most once per MaxAge. The count is a GROUP BY over pepsi.state, so it
// is cheap next to the dispatcher's own statements but not free on a queue
// of millions; it has a time limit, and a failed count leaves the depth
// series out of that scrape (and counts the failure) rather than failing
// the whole scrape.
package metrics
