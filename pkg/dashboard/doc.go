// Package dashboard is pepsi httpd's web dashboard: the pages an operator
// opens first when something is wrong, and the repairs they may make from
// there.
//
// Views, each at a stable URL with its filters in the query string, and
// each as JSON with ?format=json or an Accept header that asks for it:
//
//   - / (overview.go): "is anything wrong?" first, a banner for each thing
//     that is, with its severity (error, warning, notice), the errors first
//     (no dispatcher, stages none owns, paused stages, running
//     messages none holds, stages with unfinished messages that pepsi.conf
//     does not configure, a dispatcher whose standby is gone: standby.go
//     keeps the standbys this server has seen); then per stage the failed and
//     pending messages, the failed passes of the last minutes and their
//     share, the backlog's trend and when it would drain (counts.go), the
//     oldest pending message, when the next paused one is due, the other
//     counts, throughput on one scale for every stage (an inline SVG chart,
//     chart.go, of samples the server keeps in memory, sampler.go, and one a
//     bar in pepsi.throughput, read back when it starts: history.go), and
//     the dispatcher that owns it.
//   - /failures (failures.go): failed messages grouped by stage and reason.
//   - /schedules (schedules.go): the [schedule-NAME] sections, their last
//     and next slots, judged as pepsi doctor judges them.
//   - /messages (messages.go): messages filtered by stage, status, age and
//     text in their errors, newest first, paged by id, with how many match;
//     a paused message scheduled or waiting for a retry (wait.go).
//   - /messages/ID (message.go): one message, its payload as text or a hex
//     dump, the first 64 KiB, and /messages/ID/payload for all of it.
//
// Dashboard.Run samples every SampleEvery: the statistics, the counts of
// the queue (done messages seldom), the dispatchers' sessions. The pages
// use the last count, and count themselves only when it is old.
//
// A query string or a posted form that does not parse, or a value with a
// NUL byte or bytes that are not UTF-8, is answered with 400 (params.go)
// before a page or an action asks the database anything. The pages with
// data say when they read them and reload themselves with ?refresh=N
// (refresh.go).
//
// Actions (actions.go, retry.go, purge.go, pick.go, controls.go) retry,
// hold, release, cancel or purge one message, the messages ticked on a
// list, a failure group, or every message a list's filters match, and
// pause or resume a stage, through admin.DB's Redrive, Purge, Hold,
// Release, Cancel, PauseStage and ResumeStage (the code of pepsi queue
// retry, purge, hold, release, cancel, pause and resume) or, for what
// those cannot select, its selection repairs and SelectionIDs, with the
// same guards for running rows, on behalf of the dashboard's user. Each is a
// POST that first answers with a confirmation showing how many messages it
// will touch, and is done when posted again with confirm=yes; each is
// logged with its user and answered with a redirect to its result's page
// (POST, redirect, GET: a reload does not act again). They are allowed only
// to the ACTION_USERS of a web configuration with basic-auth users
// (auth.go): without one the dashboard is read-only.
//
// Every page is rendered on the server from html/template (render.go),
// with the templates, the style sheet (light and dark, and a phone's
// width) and a little optional JavaScript embedded in the binary (the
// reloads, the ticks, and a theme switch remembered in localStorage:
// theme.js applies it before the page is drawn); every page works without
// JavaScript. Responses forbid scripts from anywhere but
// the server itself and any inline script (Content-Security-Policy), are
// not cached, and over TLS carry HSTS; requests that change something are
// refused when they come from another origin (http.CrossOriginProtection).
// WebServe (serve.go) serves the site with the Prometheus exporters' web
// configuration (TLS, basic auth) from github.com/prometheus/exporter-toolkit,
// its 401 answers with the same headers.
package dashboard
