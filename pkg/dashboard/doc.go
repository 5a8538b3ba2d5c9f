// Package dashboard is pepsi httpd's web dashboard: the pages an operator
// opens first when something is wrong, and the repairs they may make from
// there.
//
// Views, each at a stable URL with its filters in the query string, and
// each as JSON with ?format=json or an Accept header that asks for it:
//
//   - / (overview.go): per stage, the messages in each status, the age of
//     the oldest pending one, throughput over the last minutes (an inline
//     SVG chart, chart.go, of samples the server keeps in memory,
//     sampler.go); the dispatcher that owns each stage (one of every stage,
//     or one per stage set) and the standbys.
//   - /failures (failures.go): failed messages grouped by stage and reason.
//   - /messages (messages.go): messages filtered by stage, status, age and
//     text in their errors, newest first, paged by id.
//   - /messages/ID (message.go): one message, its payload as text or a hex
//     dump, the first 64 KiB, and /messages/ID/payload for all of it.
//
// A query string or a posted form that does not parse, or a value with a
// NUL byte or bytes that are not UTF-8, is answered with 400 (params.go)
// before a page or an action asks the database anything.
//
// Actions (actions.go, retry.go, purge.go) retry one message, a failure
// group, or a stage's messages of one status, and purge done or failed
// messages older than an age, through admin.DB's Redrive and Purge, the code of pepsi queue retry
// and purge, with its guards for running rows. Each is a POST that first
// answers with a confirmation showing how many messages it will touch, and
// is done when posted again with confirm=yes; each is logged with its user.
// They are allowed only to the ACTION_USERS of a web configuration with
// basic-auth users (auth.go): without one the dashboard is read-only.
//
// Every page is rendered on the server from html/template (render.go),
// with the templates, the style sheet and a little optional JavaScript
// embedded in the binary; every page works without JavaScript. Responses
// forbid scripts from anywhere but the server itself and any inline script
// (Content-Security-Policy), and requests that change something are
// refused when they come from another origin (http.CrossOriginProtection).
// WebServe (serve.go) serves the site with the Prometheus exporters' web
// configuration (TLS, basic auth) from github.com/prometheus/exporter-toolkit.
package dashboard
