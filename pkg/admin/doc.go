// Package admin is pepsi's data access layer for the operator: the reads
// and repairs of pepsi queue (ls, show, summary, retry, purge), pepsi
// stats, pepsi doctor, the dashboard (pkg/dashboard) and /metrics
// (pkg/metrics). Every SQL statement they run lives here or, for what they
// share with the dispatcher (its statistics, the schema check, admission,
// who holds the dispatcher's lock), in the dispatcher's store, pkg/queue,
// whose pool, statuses, lock keys and errors this package builds on. The
// schema lives in sql/. Health (health.go) is the one place pepsi judges a
// running system; doctor, the dashboard and /metrics show its judgements.
package admin
