// Package config loads and validates pepsi.conf, the INI file shared by every
// pepsi command and by the stage programs (SPEC §3, seed 004 §23.3).
//
// The file has five kinds of section: [database] (DSN, WORKER_DSN),
// [pepsi-dispatch] (the coordinator's settings), [pepsi-httpd] (the web
// server's), one [stage-NAME] per stage and one [schedule-NAME] per
// periodic message. Everything is validated up front; every mistake is
// reported as an *Error that names the file and the line, so `pepsi` can
// exit 2 with one clear message.
package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DefaultPath is the configuration file used when neither -c nor PEPSI_CONFIG is given.
const DefaultPath = "/etc/pepsi/pepsi.conf"

// Config is a loaded and validated pepsi.conf.
type Config struct {
	Path     string   // the file it was loaded from; "" when none was read
	DSN      string   // [database] DSN, overridden by PEPSI_DSN (see Resolve)
	Dispatch Dispatch // the [pepsi-dispatch] section
	HTTPD    HTTPD    // the [pepsi-httpd] section
	Stages   []Stage  // the [stage-NAME] sections, in file order

	// Schedules are the [schedule-NAME] sections, in file order: messages
	// the janitor dispatcher enqueues periodically (schedule.go).
	Schedules []Schedule

	// WorkerDSN is [database] WORKER_DSN: what the stage programs get as
	// PEPSI_DSN instead of DSN, typically a connection pooler in front of
	// the server; "" when unset (then they get DSN). PEPSI_DSN overrides
	// DSN only, not this.
	WorkerDSN string

	// StageSet is [pepsi-dispatch] STAGES (or pepsi dispatch --stages,
	// which wins; see SetStages): the stages the dispatcher owns, in the
	// order given; nil (the default) for every configured stage. A
	// dispatcher with a set is one of several sharing the database, each
	// owning its own stages.
	StageSet     []string
	StageSetLine int // the STAGES line, 0 when unset or set by SetStages
}

// Dispatch holds the [pepsi-dispatch] settings.
type Dispatch struct {
	MaxRuntime        time.Duration // MAX_RUNTIME, default 300s: how long a head-of-line message may run
	WorkerIdleTimeout time.Duration // WORKER_IDLE_TIMEOUT, default 5s: when a surplus idle worker is stopped
	PollInterval      time.Duration // POLL_INTERVAL, default 30s: the heartbeat poll
	StatsInterval     time.Duration // STATS_INTERVAL, default 60s: how often statistics are flushed
	// ConfigFile is CONFIG_FILE: what workers get as -c. It defaults to the
	// file loaded (made absolute by Load, so workers find it whatever their
	// working directory); "" when no file was read, and then workers get no -c.
	ConfigFile     string
	IngressChannel string        // INGRESS_CHANNEL, default "pepsi_ingress"; matches [A-Za-z_][A-Za-z0-9_]{0,62}
	ShutdownGrace  time.Duration // SHUTDOWN_GRACE, default 10s: how long a stopping worker gets after SIGTERM before SIGKILL
	SpawnCooldown  time.Duration // SPAWN_COOLDOWN, default 5s: how long a stage whose PROGRAM cannot start is held off
	Retention      time.Duration // RETENTION, default 168h (7 days); 0 disables the retention sweep
	MetricsListen  string        // METRICS_LISTEN, default "" (off); otherwise HOST:PORT or :PORT
	OrphanSweep    time.Duration // ORPHAN_SWEEP, default 60s: how often running rows no worker holds are reset
	ReconnectMin   time.Duration // RECONNECT_MIN, default 1s: the first wait before reconnecting to the database
	ReconnectMax   time.Duration // RECONNECT_MAX, default 30s: the longest wait between reconnection attempts
	VacuumInterval time.Duration // VACUUM_INTERVAL, default 2s: how often pepsi.state's dead rows are checked (and vacuumed); 0 disables
	Tracing        bool          // TRACING, default off: a span per pass, exported over OTLP/HTTP as the OTEL_* variables say
}

// Stage holds one [stage-NAME] section.
type Stage struct {
	Name        string        // the part after "stage-"; see protocol.CheckStage
	Program     []string      // PROGRAM split into words like a shell would, without any expansion
	ProgramText string        // PROGRAM as written, without a trailing comment
	Parallelism int           // PARALLELISM, default 4: the most workers of this stage
	QueueLimit  int           // QUEUE_LIMIT, default 4: messages pipelined to one worker at once
	MaxMessages int           // MAX_MESSAGES, default 1000: messages after which a worker is recycled
	Retries     int           // RETRIES, default 0: failed passes that pause the message for a retry instead of failing it
	RetryDelay  time.Duration // RETRY_DELAY, default 10s: the first retry's delay, doubled for each later one
	RetryMax    time.Duration // RETRY_DELAY_MAX, default 1h: the longest retry delay
	Rate        Rate          // RATE, default none: at most this many messages handed out a period
	KeyHeader   string        // KEY = header:NAME, default none: the header whose value is a message's key here
	KeyLimit    int           // KEY_LIMIT, default 1: the most messages of one key in flight here
	KeyLine     int           // line of KEY_LIMIT, for the error when there is no KEY
	JoinPolicy  JoinPolicy    // JOIN_POLICY, default fail: what a child's failure does to a parent waiting here
	TraceLink   bool          // TRACE = link: a pass span links to the message's trace context instead of being its child (TRACE = child, the default)
	Line        int           // line of the [stage-NAME] header
}

// JoinPolicy is what a failed child does to its parent waiting at a join
// stage (JOIN_POLICY).
type JoinPolicy string

// The join policies.
const (
	// JoinFail fails the parent as soon as a child has failed (after its
	// retries), and cancels its unfinished children: the default, so that
	// a join stage written without failures in mind never sums up part of
	// the work as the whole.
	JoinFail JoinPolicy = "fail"
	// JoinAll releases the parent when every child has ended, failed ones
	// too: the join stage reads which failed (pepsi.children).
	JoinAll JoinPolicy = "all"
)

// Defaults, exactly as seed 004 §23.3 gives them, plus pepsi's own keys.
const (
	DefaultMaxRuntime        = 300 * time.Second  // DefaultMaxRuntime is the default MAX_RUNTIME.
	DefaultWorkerIdleTimeout = 5 * time.Second    // DefaultWorkerIdleTimeout is the default WORKER_IDLE_TIMEOUT.
	DefaultPollInterval      = 30 * time.Second   // DefaultPollInterval is the default POLL_INTERVAL.
	DefaultStatsInterval     = 60 * time.Second   // DefaultStatsInterval is the default STATS_INTERVAL.
	DefaultIngressChannel    = "pepsi_ingress"    // DefaultIngressChannel is the default INGRESS_CHANNEL.
	DefaultShutdownGrace     = 10 * time.Second   // DefaultShutdownGrace is the default SHUTDOWN_GRACE.
	DefaultSpawnCooldown     = 5 * time.Second    // DefaultSpawnCooldown is the default SPAWN_COOLDOWN.
	DefaultRetention         = 7 * 24 * time.Hour // DefaultRetention is the default RETENTION.
	DefaultParallelism       = 4                  // DefaultParallelism is the default PARALLELISM.
	DefaultQueueLimit        = 4                  // DefaultQueueLimit is the default QUEUE_LIMIT.
	DefaultKeyLimit          = 1                  // DefaultKeyLimit is the default KEY_LIMIT.
	DefaultMaxMessages       = 1000               // DefaultMaxMessages is the default MAX_MESSAGES.
	DefaultOrphanSweep       = time.Minute        // DefaultOrphanSweep is the default ORPHAN_SWEEP.
	DefaultReconnectMin      = time.Second        // DefaultReconnectMin is the default RECONNECT_MIN.
	DefaultReconnectMax      = 30 * time.Second   // DefaultReconnectMax is the default RECONNECT_MAX.
	DefaultRetryDelay        = 10 * time.Second   // DefaultRetryDelay is the default RETRY_DELAY.
	DefaultRetryMax          = time.Hour          // DefaultRetryMax is the default RETRY_DELAY_MAX.
	DefaultVacuumInterval    = 2 * time.Second    // DefaultVacuumInterval is the default VACUUM_INTERVAL.
)

// Error is a configuration mistake at a place in a file; its Error() is
// "FILE:LINE: message", or "FILE: message" when Line is 0.
type Error struct {
	File string // the file as the user named it
	Line int    // 1-based line, 0 when the mistake is not on one line
	Msg  string // what is wrong
	Err  error  // the underlying cause, if any (for errors.Is, e.g. fs.ErrNotExist)
}

// Error formats the mistake as "FILE:LINE: message".
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Default returns a Config with every default and no stages.
func Default() *Config {
	return &Config{Dispatch: Dispatch{
		MaxRuntime:        DefaultMaxRuntime,
		WorkerIdleTimeout: DefaultWorkerIdleTimeout,
		PollInterval:      DefaultPollInterval,
		StatsInterval:     DefaultStatsInterval,
		IngressChannel:    DefaultIngressChannel,
		ShutdownGrace:     DefaultShutdownGrace,
		SpawnCooldown:     DefaultSpawnCooldown,
		Retention:         DefaultRetention,
		OrphanSweep:       DefaultOrphanSweep,
		VacuumInterval:    DefaultVacuumInterval,
		ReconnectMin:      DefaultReconnectMin,
		ReconnectMax:      DefaultReconnectMax,
	}}
}

// newStage returns a stage with the default limits.
func newStage(name string, line int) Stage {
	return Stage{
		Name:        name,
		Parallelism: DefaultParallelism,
		QueueLimit:  DefaultQueueLimit,
		MaxMessages: DefaultMaxMessages,
		RetryDelay:  DefaultRetryDelay,
		RetryMax:    DefaultRetryMax,
		KeyLimit:    DefaultKeyLimit,
		JoinPolicy:  JoinFail,
		Line:        line,
	}
}

// Stage returns the stage called name.
func (c *Config) Stage(name string) (*Stage, bool) {
	for i := range c.Stages {
		if c.Stages[i].Name == name {
			return &c.Stages[i], true
		}
	}
	return nil, false
}

// StageDSN returns the DSN the stage programs get as PEPSI_DSN: WORKER_DSN,
// or DSN when it is unset.
func (c *Config) StageDSN() string {
	if c.WorkerDSN != "" {
		return c.WorkerDSN
	}
	return c.DSN
}

// StageNames returns the stage names in file order.
func (c *Config) StageNames() []string {
	names := make([]string, len(c.Stages))
	for i, s := range c.Stages {
		names[i] = s.Name
	}
	return names
}

// OwnsAll reports whether the dispatcher owns every stage: no STAGES and
// no --stages, today's single dispatcher that excludes every other one.
func (c *Config) OwnsAll() bool { return c.StageSet == nil }

// Owned returns the stages the dispatcher owns: STAGES (or --stages), or
// every configured stage, in file order.
func (c *Config) Owned() []Stage {
	if c.OwnsAll() {
		return c.Stages
	}
	var out []Stage
	for _, s := range c.Stages {
		if slices.Contains(c.StageSet, s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// SetStages sets the owned stages from a comma-separated list (pepsi
// dispatch --stages), replacing STAGES. An unknown or repeated stage, or an
// empty list, is an error naming it.
func (c *Config) SetStages(list string) error {
	names, msg := c.parseStages(list)
	if msg != "" {
		return fmt.Errorf("--stages: %s", msg)
	}
	c.StageSet, c.StageSetLine = names, 0
	return nil
}

// parseStages splits a STAGES list and checks each name against the
// configured stages; it returns what is wrong, or "".
func (c *Config) parseStages(list string) ([]string, string) {
	var names []string
	for _, f := range strings.Split(list, ",") {
		name := strings.TrimSpace(f)
		if name == "" {
			if strings.TrimSpace(list) == "" {
				return nil, "no stage given (leave it out for every stage)"
			}
			return nil, fmt.Sprintf("empty stage name in %q", list)
		}
		if _, ok := c.Stage(name); !ok {
			return nil, fmt.Sprintf("unknown stage %q (no [stage-%s] section)", name, name)
		}
		if slices.Contains(names, name) {
			return nil, fmt.Sprintf("stage %q given twice", name)
		}
		names = append(names, name)
	}
	return names, ""
}

// channelRE is what INGRESS_CHANNEL may be.
var channelRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
