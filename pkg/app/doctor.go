package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// pepsi doctor: the checks an operator runs when something is off. Each
// check is one entry of doctorChecks and one small function that reads
// what it needs through pkg/admin (see pkg/admin/doctor.go) and says OK,
// WARN or FAIL in one line, with what to do. The checks of the queue's
// health (dispatchers, wake, stages, not_run, paused, ingress, schedules) print
// the judgements of the health model (admin.Health) and judge nothing
// themselves. The thresholds are named below, or in pkg/admin/health.go,
// and documented in pepsi-doctor(1).

const (
	defaultIdleThreshold = time.Minute      // --idle-threshold
	doctorCheckTimeout   = 30 * time.Second // the most one check may take
	notifyWait           = 5 * time.Second  // how long the NOTIFY may take to come back
	notifySlow           = time.Second      // a round trip slower than this warns
	notifyQueueFull      = 0.5              // the notification queue's use that warns (PostgreSQL logs it too)
	deadRowsMin          = 10000            // dead rows that may warn …
	deadRowsShare        = 0.2              // … when also over this share of the live ones (autovacuum's default scale factor)
	connectionsShare     = 0.8              // the share of the server's connections pepsi may plan to take without a warning
)

// dispatcherConns is how many sessions a dispatcher opens itself, the
// listener and its pool of 5, as pkg/dispatch/limits.go counts them
// (ownConns; METRICS_LISTEN adds one).
const dispatcherConns = 6

// Check verdicts.
const (
	statusOK   = admin.StatusOK
	statusWarn = admin.StatusWarn
	statusFail = admin.StatusFail
)

// doctorResult is one check's verdict: "STATUS check: message: action".
type doctorResult struct {
	Check   string `json:"check"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Action  string `json:"action,omitempty"` // what to do; "" when OK
	Details any    `json:"details,omitempty"`
}

// doctorCheck is one entry of doctorChecks.
type doctorCheck struct {
	name   string
	schema bool // reads pepsi's tables: not run on a database without them
	run    func(d *doctor) doctorResult
}

// doctorChecks are the checks, in the order they are printed.
var doctorChecks = []doctorCheck{
	{"schema", false, checkSchema},
	{"dispatchers", true, checkDispatchers},
	{"locks", true, checkLocks},
	{"xmin", false, checkXmin},
	{"autovacuum", true, checkAutovacuum},
	{"vacuum", true, checkVacuum},
	{"notify", true, checkNotify},
	{"pooler", false, checkPooler},
	{"wake", true, checkWake},
	{"connections", true, checkConnections},
	{"stages", true, checkStages},
	{"not_run", true, checkNotRun},
	{"paused", true, checkPaused},
	{"ingress", true, checkIngress},
	{"schedules", true, checkSchedules},
	{"joins", true, checkJoins},
}

// doctorOptions are the thresholds pepsi doctor's options set.
type doctorOptions struct {
	idle         time.Duration // --idle-threshold
	pausedLong   time.Duration // --paused-threshold
	pausedPileUp int64         // --paused-backlog
}

// doctor is what the checks share: the configuration, the database, and
// what more than one check reads (read once, when first needed): the
// health model, whose judgements the queue's checks print.
type doctor struct {
	doctorOptions
	ctx      context.Context
	cfg      *config.Config
	db       *admin.DB
	noSchema bool // the schema check found no pepsi schema

	model  *admin.Health
	tables []admin.TableHealth
}

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:      "doctor",
		Usage:     "check the database, the dispatchers and the configuration for trouble",
		UsageText: "pepsi doctor [--idle-threshold DURATION] [--paused-threshold DURATION] [--paused-backlog N] [--json]",
		Description: "Runs every check and prints one line for each: OK, WARN or FAIL, the\n" +
			"check's name, what it found and, unless OK, what to do. It changes\n" +
			"nothing (its NOTIFY wakes the dispatchers once). Exit status 0 when no\n" +
			"check fails (warnings included), 1 when one does, 2 for a usage or\n" +
			"configuration error.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "idle-threshold", Value: "60s", Usage: "warn of sessions idle in a transaction, or holding a snapshot, for longer than `DURATION`"},
			&cli.BoolFlag{Name: "json", DisableDefaultText: true, Usage: "print the results as one JSON object"},
		}, doctorPausedFlags()...),
		Action: doctorAction,
	}
}

func doctorAction(c *cli.Context) error {
	if c.Args().Present() {
		return usage("unexpected argument %q", c.Args().First())
	}
	var opts doctorOptions
	var err error
	if opts.idle, err = parseAge("idle-threshold", c.String("idle-threshold")); err != nil {
		return err
	}
	if err := parsePausedFlags(c, &opts); err != nil {
		return err
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if _, err := parseDSN(cfg); err != nil {
		return err
	}
	results := runDoctor(c.Context, cfg, opts)
	failed := slices.ContainsFunc(results, func(r doctorResult) bool { return r.Status == statusFail })
	if c.Bool("json") {
		status := statusOK
		for _, r := range results {
			status = worse(status, r.Status)
		}
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Status string         `json:"status"`
			Checks []doctorResult `json:"checks"`
		}{status, results}); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if _, err := fmt.Fprintln(c.App.Writer, r.line()); err != nil {
				return err
			}
		}
	}
	if failed {
		return cli.Exit("", exitFailure)
	}
	return nil
}

// runDoctor connects and runs every check; when the database cannot be
// reached the one result says so.
func runDoctor(ctx context.Context, cfg *config.Config, opts doctorOptions) []doctorResult {
	cctx, cancel := context.WithTimeout(ctx, doctorCheckTimeout)
	db, err := admin.Open(cctx, doctorDSN(cfg.DSN), queue.Options{App: "pepsi doctor", MaxConns: 2})
	cancel()
	if err != nil {
		return []doctorResult{{Check: "database", Status: statusFail, Message: "cannot connect: " + strings.TrimPrefix(err.Error(), "connect: "),
			Action: "check DSN in [database] of " + cfgName(cfg) + " (or PEPSI_DSN) and that PostgreSQL runs"}}
	}
	defer db.Close()
	d := &doctor{doctorOptions: opts, cfg: cfg, db: db}
	results := make([]doctorResult, 0, len(doctorChecks))
	for _, ch := range doctorChecks {
		var r doctorResult
		if ch.schema && d.noSchema {
			r = warn("not checked: this database has no pepsi schema", "run pepsi migrate")
		} else {
			cctx, cancel := context.WithTimeout(ctx, doctorCheckTimeout)
			d.ctx = cctx
			r = ch.run(d)
			if cctx.Err() != nil && ctx.Err() == nil && r.Status != statusOK {
				r = fail(fmt.Sprintf("the database did not answer within %v", doctorCheckTimeout), "see what holds it up: pg_stat_activity, the server log")
			}
			cancel()
		}
		r.Check = ch.name
		results = append(results, r)
	}
	return results
}

// doctorDSN is dsn with default_query_exec_mode=exec, unless it sets
// one: no prepared statements, which a pooler in transaction mode (the
// very thing the pooler check looks for) would lose between transactions.
func doctorDSN(dsn string) string {
	switch {
	case strings.Contains(dsn, "default_query_exec_mode"):
		return dsn
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if strings.Contains(dsn, "?") {
			return dsn + "&default_query_exec_mode=exec"
		}
		return dsn + "?default_query_exec_mode=exec"
	}
	return strings.TrimSpace(dsn + " default_query_exec_mode=exec")
}

// line is the result as pepsi doctor prints it.
func (r doctorResult) line() string {
	s := fmt.Sprintf("%-5s %s: %s", r.Status, r.Check, r.Message)
	if r.Action != "" {
		s += ": " + r.Action
	}
	return s
}

func ok(msg string, details any) doctorResult {
	return doctorResult{Status: statusOK, Message: msg, Details: details}
}

func warn(msg, action string) doctorResult {
	return doctorResult{Status: statusWarn, Message: msg, Action: action}
}

func fail(msg, action string) doctorResult {
	return doctorResult{Status: statusFail, Message: msg, Action: action}
}

// broken is a check that could not read what it needs.
func broken(err error) doctorResult {
	return fail("could not check: "+strings.Join(strings.Fields(err.Error()), " "), "see the server's log, and the rights of the DSN's role")
}

// with returns r with details.
func (r doctorResult) with(details any) doctorResult {
	r.Details = details
	return r
}

// worse returns the worse of two verdicts.
func worse(a, b string) string {
	rank := map[string]int{statusOK: 0, statusWarn: 1, statusFail: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// cfgName names the configuration file in advice.
func cfgName(cfg *config.Config) string {
	if cfg.Path == "" {
		return "pepsi.conf"
	}
	return cfg.Path
}

// health returns the health model, read once.
func (d *doctor) health() (*admin.Health, error) {
	if d.model == nil {
		hc := admin.HealthConfigOf(d.cfg)
		hc.PausedLong, hc.PausedPileUp = d.pausedLong, d.pausedPileUp
		h, err := d.db.Health(d.ctx, hc)
		if err != nil {
			return nil, err
		}
		d.model = h
	}
	return d.model, nil
}

// queueTables returns the health of the tables the dispatcher vacuums,
// read once.
func (d *doctor) queueTables() ([]admin.TableHealth, error) {
	if d.tables == nil {
		for _, t := range queue.Vacuumed {
			h, err := d.db.TableHealth(d.ctx, t)
			if err != nil {
				return nil, err
			}
			d.tables = append(d.tables, h)
		}
	}
	return d.tables, nil
}

func checkSchema(d *doctor) doctorResult {
	ms, current, err := d.db.SchemaStatus(d.ctx)
	if err != nil {
		return broken(err)
	}
	want := len(ms)
	var missing []string
	for _, m := range ms {
		if m.Version <= current && m.AppliedAt == nil {
			missing = append(missing, fmt.Sprintf("%03d_%s", m.Version, m.Name))
		}
	}
	switch {
	case current == 0:
		d.noSchema = true
		return fail("this database has no pepsi schema", "run pepsi migrate")
	case current < want:
		return fail(fmt.Sprintf("version %d, this pepsi expects %d", current, want),
			"run pepsi migrate (beside running dispatchers), then restart the dispatchers")
	case current > want:
		return fail(fmt.Sprintf("version %d, newer than this pepsi knows (%d)", current, want),
			"run the pepsi release that migrated it")
	case len(missing) > 0:
		return warn(fmt.Sprintf("version %d, but %s never recorded as applied", current, strings.Join(missing, ", ")),
			"compare pepsi.schema_migration with pepsi migrate status")
	}
	return ok(fmt.Sprintf("version %d, as this pepsi expects", current), nil)
}

// who names a dispatcher's session: its application_name ("pepsi dispatch
// pid 812 on mx1") or its server pid.
func who(s admin.DispatcherSession) string {
	if s.Name != "" {
		return s.Name
	}
	return fmt.Sprintf("server pid %d", s.ServerPID)
}

func checkDispatchers(d *doctor) doctorResult {
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	ds := h.Dispatchers
	var running []string
	for _, r := range ds.Running {
		owns := "every stage"
		if !r.All {
			owns = "stages " + strings.Join(r.Stages, ",")
			if len(r.Stages) == 0 {
				owns = "no stage checked here"
			}
		}
		running = append(running, who(r)+" owns "+owns)
	}
	standbys := "no standby"
	if n := len(ds.Standbys); n > 0 {
		var names []string
		for _, s := range ds.Standbys {
			w := who(s)
			if s.WaitsFor != "" {
				w += " (for stage " + s.WaitsFor + ")"
			}
			names = append(names, w)
		}
		standbys = plural(int64(n), "standby") + ": " + strings.Join(names, ", ")
	}
	unowned := h.Unowned()
	switch {
	case len(h.NeedOwner()) == 0 && !h.DispatcherRuns():
		return warn("no dispatcher runs (no stage configured here, and none with messages waiting)", "start pepsi dispatch").with(ds)
	case len(unowned) > 0:
		msg := fmt.Sprintf("no dispatcher owns stage %s", strings.Join(unowned, ", "))
		act := "start pepsi dispatch"
		if len(ds.Running) > 0 {
			msg += " (" + strings.Join(running, "; ") + ")"
			act = "start a dispatcher for them: pepsi dispatch --stages " + strings.Join(unowned, ",")
		}
		if len(ds.Standbys) > 0 {
			msg += "; " + standbys
		}
		return fail(msg, act).with(ds)
	}
	return ok(strings.Join(running, "; ")+"; "+standbys, ds)
}

// lockName says what kind of lock l is, in a few words.
func lockName(l admin.AdvisoryLock) string {
	switch l.Kind {
	case queue.LockDispatcher:
		if l.Mode == "ExclusiveLock" {
			return "database-wide (exclusive)"
		}
		return "database-wide (shared)"
	case queue.LockStage, queue.LockFence, queue.LockStandby:
		if l.Stage != "" {
			return l.Kind + " " + l.Stage
		}
		return l.Kind + " " + l.Key
	case queue.LockOther:
		return "other " + l.Key
	}
	return l.Kind
}

func checkLocks(d *doctor) doctorResult {
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	locks, err := d.db.AdvisoryLocks(d.ctx, h.Stages())
	if err != nil {
		return broken(err)
	}
	// One part per session and state: "NAME (server pid N): a, b".
	type part struct {
		pid     int32
		granted bool
	}
	var order []part
	names := map[part][]string{}
	apps := map[int32]string{}
	var held, waiting int
	var foreign []string
	for _, l := range locks {
		p := part{l.PID, l.Granted}
		if _, seen := names[p]; !seen {
			order = append(order, p)
		}
		names[p] = append(names[p], lockName(l))
		apps[l.PID] = l.Name
		if l.Granted {
			held++
		} else {
			waiting++
		}
		if l.Granted && l.IsPepsi() && l.Kind != queue.LockToken && !strings.HasPrefix(l.Name, "pepsi ") {
			foreign = append(foreign, fmt.Sprintf("%s held by server pid %d (%q)", lockName(l), l.PID, l.Name))
		}
	}
	var parts []string
	for _, p := range order {
		name := apps[p.pid]
		if name == "" {
			name = "?"
		}
		verb := ""
		if !p.granted {
			verb = "waits for "
		}
		parts = append(parts, fmt.Sprintf("%s (server pid %d): %s%s", name, p.pid, verb, strings.Join(names[p], ", ")))
	}
	summary := "none held or waited for"
	if len(parts) > 0 {
		summary = fmt.Sprintf("%d held, %d waited for", held, waiting)
		summary += ": " + strings.Join(parts, "; ")
	}
	switch {
	case len(foreign) > 0:
		return warn(strings.Join(foreign, "; ")+", a session that is not a pepsi dispatcher's",
			"if it is stale, end it: SELECT pg_terminate_backend(PID)").with(locks)
	case h.NoJanitor():
		return warn(summary+"; no dispatcher holds the janitor lock: retention and the vacuum check do not run",
			"a dispatcher takes it at its next heartbeat (POLL_INTERVAL); if this stays, restart one").with(locks)
	}
	return ok(summary, locks)
}

// describeHeld says what a session holding the horizon back is doing.
func describeHeld(s admin.HeldSession) string {
	name := s.Name
	if name == "" {
		name = s.User
	}
	what := "in a transaction"
	switch {
	case strings.HasPrefix(s.State, "idle in transaction"):
		what = s.State
	case s.LockWait && strings.HasPrefix(s.Name, "pepsi dispatch pid "):
		what = "a --standby waiting for its lock"
	case s.LockWait:
		what = "waiting for an advisory lock"
	}
	return fmt.Sprintf("server pid %d (%s) %s for %s", s.PID, name, what, fmtWait(s.For))
}

func checkXmin(d *doctor) doctorResult {
	x, err := d.db.XminHolders(d.ctx, d.idle)
	if err != nil {
		return broken(err)
	}
	if x.Empty() {
		return ok(fmt.Sprintf("no session idle in a transaction or holding a snapshot for longer than %s", fmtWait(d.idle)), nil)
	}
	var what, acts []string
	standby := false
	for _, s := range x.Sessions {
		what = append(what, describeHeld(s))
		standby = standby || (s.LockWait && strings.HasPrefix(s.Name, "pepsi dispatch pid "))
	}
	if len(x.Sessions) > 0 {
		acts = append(acts, "commit or end them (SELECT pg_terminate_backend(PID)), and set idle_in_transaction_session_timeout")
	}
	if standby {
		acts = append(acts, "a --standby holds a snapshot while it waits: stop it while the queue churns")
	}
	for _, s := range x.Slots {
		what = append(what, fmt.Sprintf("replication slot %s (%s) that nothing reads", s.Name, s.Type))
	}
	if len(x.Slots) > 0 {
		acts = append(acts, "start the slot's reader or drop it: SELECT pg_drop_replication_slot('NAME')")
	}
	for _, p := range x.Prepared {
		what = append(what, fmt.Sprintf("prepared transaction %q (%s) for %s", p.GID, p.Owner, fmtWait(p.For)))
	}
	if len(x.Prepared) > 0 {
		acts = append(acts, "COMMIT PREPARED or ROLLBACK PREPARED it")
	}
	return warn(fmt.Sprintf("VACUUM cannot reclaim the queue's dead rows past %s: %s", plural(int64(len(what)), "holder"), strings.Join(what, "; ")),
		strings.Join(acts, "; ")).with(x)
}

func checkAutovacuum(d *doctor) doctorResult {
	s, err := d.db.VacuumSettings(d.ctx)
	if err != nil {
		return broken(err)
	}
	tables, err := d.queueTables()
	if err != nil {
		return broken(err)
	}
	var off, acts []string
	if !s.Autovacuum {
		off = append(off, "the server's autovacuum is off")
		acts = append(acts, "ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf()")
	}
	if !s.TrackCounts {
		off = append(off, "track_counts is off (nothing counts dead rows)")
		acts = append(acts, "ALTER SYSTEM SET track_counts = on; SELECT pg_reload_conf()")
	}
	for _, t := range tables {
		if t.AutovacuumOff {
			off = append(off, "autovacuum_enabled = false on "+t.Table)
			acts = append(acts, "ALTER TABLE "+t.Table+" RESET (autovacuum_enabled)")
		}
	}
	details := struct {
		admin.VacuumSettings
		Tables []admin.TableHealth `json:"tables"`
	}{s, tables}
	vi := d.cfg.Dispatch.VacuumInterval
	switch {
	case len(off) == 0:
		return ok("on, for the server and for "+strings.Join(queue.Vacuumed, ", "), details)
	case vi == 0 || !s.TrackCounts:
		return fail(strings.Join(off, "; ")+", and the dispatcher's own vacuum check is off (VACUUM_INTERVAL = 0) or blind: nothing vacuums the queue",
			strings.Join(acts, "; ")).with(details)
	}
	return warn(strings.Join(off, "; ")+fmt.Sprintf(": only the dispatcher's own sweep (every VACUUM_INTERVAL, %s, while one runs) vacuums %s, and nothing else of the database",
		fmtWait(vi), strings.Join(queue.Vacuumed, ", ")), strings.Join(acts, "; ")).with(details)
}

func checkVacuum(d *doctor) doctorResult {
	tables, err := d.queueTables()
	if err != nil {
		return broken(err)
	}
	var bad []string
	for _, t := range tables {
		if t.Dead > deadRowsMin && float64(t.Dead) > deadRowsShare*float64(t.Live) {
			ratio := "no live row"
			if t.Live > 0 {
				ratio = fmt.Sprintf("%.1f× live", float64(t.Dead)/float64(t.Live))
			}
			bad = append(bad, fmt.Sprintf("%s has %s dead rows (%s), %s", t.Table, groupDigits(t.Dead), ratio, fmtBytes(t.Bytes)))
		}
	}
	if len(bad) > 0 {
		return warn(strings.Join(bad, "; "),
			"run VACUUM (VERBOSE) on it; if it removes none, see xmin; if it keeps coming back, see autovacuum and VACUUM_INTERVAL").with(tables)
	}
	t := tables[0] // pepsi.state_live, the hot table
	last := "never vacuumed"
	if t.LastVacuum != nil {
		last = "vacuumed " + fmtWait(time.Since(*t.LastVacuum)) + " ago"
	}
	return ok(fmt.Sprintf("%s has %s live rows, %s dead, %s; %s", t.Table, groupDigits(t.Live), groupDigits(t.Dead), fmtBytes(t.Bytes), last), tables)
}

func checkNotify(d *doctor) doctorResult {
	channel, err := d.db.IngressChannel(d.ctx)
	if err != nil {
		return broken(err)
	}
	rt, err := d.db.NotifyRoundTrip(d.ctx, d.cfg.DSN, channel, notifyWait)
	if errors.Is(err, admin.ErrNoNotification) {
		return fail(fmt.Sprintf("a NOTIFY on %s did not come back within %s", channel, fmtWait(notifyWait)),
			"dispatchers then wake only every POLL_INTERVAL: see pooler, and the server's log")
	}
	if err != nil {
		return broken(err)
	}
	msg := fmt.Sprintf("a NOTIFY on %s came back in %s", channel, fmtWait(rt.Took))
	var problems, acts []string
	if rt.QueueUsage >= notifyQueueFull {
		problems = append(problems, fmt.Sprintf("the server's notification queue is %.0f%% full", 100*rt.QueueUsage))
		acts = append(acts, "a session that LISTENs is stuck in a transaction: find it (see xmin) and end it")
	}
	if rt.Took > notifySlow {
		problems = append(problems, "slowly")
		acts = append(acts, "see what holds the server up (pg_stat_activity)")
	}
	if ch := d.cfg.Dispatch.IngressChannel; ch != channel {
		problems = append(problems, fmt.Sprintf("INGRESS_CHANNEL %s in %s is not %s, the channel pepsi.settings records", ch, cfgName(d.cfg), channel))
		acts = append(acts, "dispatchers that share a database share one channel: set INGRESS_CHANNEL = "+channel)
	}
	if len(problems) > 0 {
		return warn(msg+"; "+strings.Join(problems, "; "), strings.Join(acts, "; ")).with(rt)
	}
	return ok(msg, rt)
}

func checkPooler(d *doctor) doctorResult {
	p, err := admin.CheckPooler(d.ctx, d.cfg.DSN)
	if err != nil {
		return broken(err)
	}
	if p.NoSession != nil {
		why := strings.TrimPrefix(p.NoSession.Error(), queue.ErrNoSession.Error()+": ")
		return fail("the DSN goes through a pooler in transaction mode: "+why,
			"connect the dispatcher directly (DSN) and give the pooler to the workers (WORKER_DSN)").with(p)
	}
	if p.Pooled {
		return ok(fmt.Sprintf("a pooler in session mode (its cancel key names pid %d, the server's process is %d): the dispatcher's session check passes",
			p.KeyPID, p.BackendPID), p)
	}
	return ok(fmt.Sprintf("a direct connection (server pid %d), as the dispatcher needs", p.BackendPID), p)
}

func checkWake(d *doctor) doctorResult {
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	w := h.Wake
	armed := 0
	for _, r := range w.Rows {
		if r.Armed {
			armed++
		}
	}
	stale := h.StaleWake()
	switch {
	case h.WakeNeverSet():
		return warn("never set (a server crash since a dispatcher last ran): every pepsi.enqueue() notifies, which slows producers under load",
			"start pepsi dispatch: it sets the flag (one that stops cleanly clears it)").with(w)
	case len(stale) > 0:
		return warn(fmt.Sprintf("armed for set %s, which no running dispatcher owns (one killed while idle?): every pepsi.enqueue() notifies",
			strings.Join(stale, ", ")), fmt.Sprintf("start that set's dispatcher, or clear it: SELECT pepsi.arm('%s', false)", stale[0])).with(w)
	case w.Armed:
		return ok(fmt.Sprintf("armed (%d of %d dispatcher sets idle, waiting for a notification)", armed, len(w.Rows)), w)
	case h.DispatcherRuns():
		return ok("not armed: the dispatchers are busy and poll; producers do not notify", w)
	}
	return ok("not armed, and no dispatcher runs: producers do not notify; a dispatcher polls when it starts", w)
}

func checkConnections(d *doctor) doctorResult {
	sc, err := d.db.ServerConnections(d.ctx)
	if err != nil {
		return broken(err)
	}
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	own := dispatcherConns
	if d.cfg.Dispatch.MetricsListen != "" {
		own++
	}
	own *= max(1, len(h.Dispatchers.Running))
	workers := 0
	for _, s := range d.cfg.Stages {
		workers += s.Parallelism
	}
	how := fmt.Sprintf("PARALLELISM adds up to %d workers, a connection each, and the dispatchers open %d", workers, own)
	if d.cfg.WorkerDSN != "" {
		workers = 0
		how = fmt.Sprintf("the workers connect through WORKER_DSN (not counted), and the dispatchers open %d", own)
	}
	need, avail := workers+own, sc.Available()
	server := fmt.Sprintf("max_connections %d - superuser_reserved_connections %d", sc.MaxConnections, sc.SuperuserReserved)
	if sc.Reserved > 0 {
		server += fmt.Sprintf(" - reserved_connections %d", sc.Reserved)
	}
	details := struct {
		admin.ServerConnections
		Available int `json:"available"`
		Workers   int `json:"workers"`
		Own       int `json:"dispatcher_connections"`
	}{sc, avail, workers, own}
	act := "lower PARALLELISM, raise max_connections, or put the workers behind a pooler (WORKER_DSN)"
	switch {
	case len(d.cfg.Stages) == 0:
		return ok(fmt.Sprintf("no [stage-NAME] in %s to add up; %d of %d connections open", cfgName(d.cfg), sc.Open, avail), details)
	case need > avail:
		return fail(fmt.Sprintf("%s: %d connections, more than the server allows (%d: %s); pepsi dispatch refuses to start", how, need, avail, server), act).with(details)
	case float64(need) > connectionsShare*float64(avail):
		return warn(fmt.Sprintf("%s: %d of the %d connections the server allows (%s), leaving %d for everything else", how, need, avail, server, avail-need), act).with(details)
	}
	return ok(fmt.Sprintf("%s: %d of the %d connections the server allows; %d open now", how, need, avail, sc.Open), details)
}

func checkStages(d *doctor) doctorResult {
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	if len(d.cfg.Stages) == 0 {
		return ok("no [stage-NAME] in "+cfgName(d.cfg)+" to compare the queue with", nil)
	}
	if lines := unconfigured(d.cfg, h.Unconfigured()); len(lines) > 0 {
		return warn(strings.Join(lines, "; "),
			"add the section (and restart the dispatchers), or move the messages: pepsi queue retry --to-stage STAGE ID…")
	}
	return ok("every stage with messages waiting has its [stage-NAME] in "+cfgName(d.cfg), nil)
}

func checkIngress(d *doctor) doctorResult {
	h, err := d.health()
	if err != nil {
		return broken(err)
	}
	b := h.Backlog
	if b.Rows == 0 {
		return ok("empty: every pepsi.enqueue() is admitted", b)
	}
	msg := fmt.Sprintf("%s wait in pepsi.ingress, the oldest for %s", plural(b.Rows, "message"), fmtWait(h.BacklogAge()))
	act := "a dispatcher admits them at every poll: start pepsi dispatch, and restart any older than schema 11"
	switch h.BacklogStatus() {
	case statusFail:
		return fail(msg+fmt.Sprintf(" (over %d × POLL_INTERVAL)", admin.IngressFailPolls), act).with(b)
	case statusWarn:
		return warn(msg+fmt.Sprintf(" (over %d × POLL_INTERVAL)", admin.IngressWarnPolls), act).with(b)
	}
	return ok(msg+": admitted at the next poll", b)
}

// fmtWait writes a duration for a person: fmtAge's form from a second
// up, milliseconds below.
func fmtWait(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return fmtAge(d)
}

// groupDigits writes n with its thousands apart: 120 000.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtBytes writes a size in kB, MB or GB (powers of 1024, as pg_size_pretty).
func fmtBytes(n int64) string {
	const k = 1024
	switch {
	case n < k*k:
		return fmt.Sprintf("%d kB", n/k)
	case n < k*k*k:
		return fmt.Sprintf("%.1f MB", float64(n)/(k*k))
	}
	return fmt.Sprintf("%.1f GB", float64(n)/(k*k*k))
}
