package admin

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The health model: every judgement pepsi makes of a running system, each
// defined once, here. pepsi doctor's lines, the dashboard's banners and the
// metrics' health series are views of it; none judges on its own.

// Verdicts of a judgement that has degrees, as pepsi doctor prints them.
const (
	StatusOK   = "OK"
	StatusWarn = "WARN"
	StatusFail = "FAIL"
)

// Thresholds of the judgements.
const (
	// IngressWarnPolls: a row of pepsi.ingress older than this many
	// POLL_INTERVALs warns (a dispatcher admits the backlog at every poll) …
	IngressWarnPolls = 2
	// IngressFailPolls … and this many fails.
	IngressFailPolls = 10
	// ScheduleLate is how long past its time a schedule's slot may be
	// unenqueued without a warning, at least: the janitor role changes
	// hands at a dispatcher's heartbeat (POLL_INTERVAL).
	ScheduleLate = time.Minute
	// PausedLong is how long a stage may be paused (pepsi queue pause)
	// before pepsi doctor warns of it, by default: longer than a deploy or
	// a repair takes, so a pause that was forgotten. Nothing ends a pause
	// by itself, as nothing releases mail on hold in Postfix.
	PausedLong = time.Hour
	// PausedPileUp is how many messages may reach a paused stage after its
	// pause began before pepsi doctor warns of it, by default: they wait,
	// pending, and more come.
	PausedPileUp = 1000
)

// HealthConfig is what of the configuration the health model reads.
type HealthConfig struct {
	Stages        []string          // the [stage-NAME] sections, in pipeline order
	StatsInterval time.Duration     // STATS_INTERVAL: the span of NotRun
	PollInterval  time.Duration     // POLL_INTERVAL: the backlog's and the schedules' lateness
	Schedules     []config.Schedule // the [schedule-NAME] sections
	// Also are more stages whose owner to read (the dashboard lists the
	// stages with statistics too).
	Also []string
	// PausedLong and PausedPileUp are the pause judgement's thresholds
	// (PausedStates); 0 for the defaults of the same names.
	PausedLong   time.Duration
	PausedPileUp int64
}

// HealthConfigOf returns what cfg tells the health model.
func HealthConfigOf(cfg *config.Config) HealthConfig {
	return HealthConfig{Stages: cfg.StageNames(), StatsInterval: cfg.Dispatch.StatsInterval,
		PollInterval: cfg.Dispatch.PollInterval, Schedules: cfg.Schedules}
}

// Health is a running system as pepsi judges it: what it read of the
// database in one call, and the judgements (its methods) over it.
type Health struct {
	Config HealthConfig
	Now    time.Time    // the server's clock at the count
	Live   []StageCount // the messages by stage and status, every status but done
	// Dispatchers are the running dispatchers and standbys, asked about
	// Stages, the stages running messages were handed out at, the wake
	// sets' and Config.Also.
	Dispatchers Dispatchers
	// Paused are the paused stages (pepsi queue pause), by name: handed no
	// new message.
	Paused []StagePause
	// Arrived are, per paused stage, the messages that reached it pending
	// since its pause began (PausedArrivals).
	Arrived map[string]int64
	// NotRun are the stages whose recent answers were mostly 75 (not run,
	// queue.NotRunAnswers.MostlyNotRun): their messages come back every
	// second with no attempt counted.
	NotRun  []queue.NotRunAnswers
	Backlog Backlog   // what waits in pepsi.ingress
	Wake    WakeState // the wake flag
	// Janitor is the session holding the janitor lock (retention, the
	// vacuum check, the schedules); nil when none does.
	Janitor   *AdvisoryLock
	Schedules []queue.ScheduleRun // pepsi.schedule, by name
}

// Health reads the health model: the live counts, then the rest (HealthOf).
func (db *DB) Health(ctx context.Context, hc HealthConfig) (*Health, error) {
	live, now, err := db.LiveCounts(ctx)
	if err != nil {
		return nil, err
	}
	return db.HealthOf(ctx, hc, live, now)
}

// HealthOf reads the health model around counts already taken (LiveCounts
// and its clock), for a caller that keeps its own.
func (db *DB) HealthOf(ctx context.Context, hc HealthConfig, live []StageCount, now time.Time) (*Health, error) {
	h := &Health{Config: hc, Now: now, Live: live}
	var err error
	if h.Wake, err = db.WakeState(ctx); err != nil {
		return nil, err
	}
	if h.Dispatchers, err = db.DispatcherSessions(ctx, h.askStages()); err != nil {
		return nil, err
	}
	if h.Paused, err = db.PausedStages(ctx); err != nil {
		return nil, err
	}
	if len(h.Paused) > 0 {
		if h.Arrived, err = db.PausedArrivals(ctx); err != nil {
			return nil, err
		}
	}
	if h.NotRun, err = db.NotRunStages(ctx, hc.StatsInterval); err != nil {
		return nil, err
	}
	if h.Backlog, err = db.IngressBacklog(ctx); err != nil {
		return nil, err
	}
	locks, err := db.AdvisoryLocks(ctx, nil)
	if err != nil {
		return nil, err
	}
	for i, l := range locks {
		if l.Granted && l.Kind == queue.LockJanitor {
			h.Janitor = &locks[i]
			break
		}
	}
	if len(hc.Schedules) > 0 {
		if h.Schedules, err = db.Schedules(ctx); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// askStages are the stages whose owners the model reads: Stages, then
// those running messages were handed out at, the wake sets' and Also.
func (h *Health) askStages() []string {
	out := h.Stages()
	add := func(s string) {
		if s != "" && s != queue.AllStages && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, c := range h.Live {
		add(c.HandedAt)
	}
	for _, r := range h.Wake.Rows {
		for _, s := range strings.Split(r.Set, ",") {
			add(s)
		}
	}
	for _, s := range h.Config.Also {
		add(s)
	}
	return out
}

// waiting reports whether messages in status wait for a worker of their
// stage: pending, paused (until due), held (until released) or waiting at
// a join (until their children have ended: then pending there).
func waiting(status queue.Status) bool {
	return status == queue.Pending || status == queue.Paused || status == queue.Held || status == queue.Waiting
}

// Stages are the stages the model speaks of: the configured ones, then
// the others with unfinished messages, by name.
func (h *Health) Stages() []string {
	return slices.Concat(h.Config.Stages, h.others(func(s queue.Status) bool { return !s.Finished() }))
}

// others are the stages not configured with messages in a status that
// counts, by name.
func (h *Health) others(counts func(queue.Status) bool) []string {
	var out []string
	for _, c := range h.Live {
		if counts(c.Status) && !slices.Contains(h.Config.Stages, c.Stage) && !slices.Contains(out, c.Stage) {
			out = append(out, c.Stage)
		}
	}
	slices.Sort(out)
	return out
}

// DispatcherRuns reports whether a dispatcher holds its locks.
func (h *Health) DispatcherRuns() bool { return len(h.Dispatchers.Running) > 0 }

// Owner is the running dispatcher that owns stage, nil when none does.
func (h *Health) Owner(stage string) *DispatcherSession { return h.Dispatchers.Owners[stage] }

// NeedOwner are the stages that need a dispatcher: the configured ones,
// or, with none configured, those with messages waiting, by name.
func (h *Health) NeedOwner() []string {
	if len(h.Config.Stages) > 0 {
		return slices.Clone(h.Config.Stages)
	}
	return h.others(waiting)
}

// Unowned are the stages that need a dispatcher (NeedOwner) and have none:
// their messages wait.
func (h *Health) Unowned() []string {
	var out []string
	for _, s := range h.NeedOwner() {
		if h.Owner(s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// StageMessages is a number of messages of one stage.
type StageMessages struct {
	Stage string `json:"stage"`
	N     int64  `json:"n"`
}

// Unconfigured are the stages with messages waiting (UnconfiguredIn).
func (h *Health) Unconfigured() []StageMessages {
	counts := make([]Count, 0, len(h.Live))
	for _, c := range h.Live {
		counts = append(counts, Count{Stage: c.Stage, Status: c.Status, N: c.N, Oldest: c.Oldest})
	}
	return UnconfiguredIn(h.Config.Stages, counts)
}

// UnconfiguredIn are the stages of counts with messages waiting (pending,
// paused, held, or parents waiting at a join) that none of configured is, while some stage is
// configured: no worker runs them. By name.
func UnconfiguredIn(configured []string, counts []Count) []StageMessages {
	if len(configured) == 0 {
		return nil
	}
	var out []StageMessages
	for _, c := range counts {
		if !waiting(c.Status) || slices.Contains(configured, c.Stage) {
			continue
		}
		i := slices.IndexFunc(out, func(m StageMessages) bool { return m.Stage == c.Stage })
		if i < 0 {
			out = append(out, StageMessages{Stage: c.Stage})
			i = len(out) - 1
		}
		out[i].N += c.N
	}
	slices.SortFunc(out, func(a, b StageMessages) int { return strings.Compare(a.Stage, b.Stage) })
	return out
}

// Orphans are the running messages no dispatcher holds, by stage: the
// stage they were handed out at has no owner, so no worker has them.
func (h *Health) Orphans() map[string]int64 {
	out := map[string]int64{}
	for _, c := range h.Live {
		if c.Status == queue.Running && h.Owner(c.HandedAt) == nil {
			out[c.HandedAt] += c.N
		}
	}
	return out
}

// StagePaused reports whether stage is paused.
func (h *Health) StagePaused(stage string) bool {
	return slices.ContainsFunc(h.Paused, func(p StagePause) bool { return p.Stage == stage })
}

// PausedState is a paused stage as the model judges it.
type PausedState struct {
	StagePause
	For     time.Duration `json:"for_ns"`  // how long it has been paused
	Pending int64         `json:"pending"` // its pending messages: what the pause holds up
	// Arrived are the messages that reached it pending since the pause
	// began: how much its backlog grew.
	Arrived int64 `json:"arrived"`
	Long    bool  `json:"long"`    // paused longer than Config.PausedLong
	PilesUp bool  `json:"pile_up"` // Config.PausedPileUp or more arrived
}

// Warns reports whether the pause is one to warn of: long, or piling up.
func (p PausedState) Warns() bool { return p.Long || p.PilesUp }

// PausedThresholds are the pause judgement's thresholds: Config's, or the
// defaults PausedLong and PausedPileUp.
func (h *Health) PausedThresholds() (time.Duration, int64) {
	long, pile := h.Config.PausedLong, h.Config.PausedPileUp
	if long <= 0 {
		long = PausedLong
	}
	if pile <= 0 {
		pile = PausedPileUp
	}
	return long, pile
}

// PausedStates judges each paused stage, by name: paused for longer than
// PausedThresholds' duration, or with as many messages arrived since.
func (h *Health) PausedStates() []PausedState {
	long, pile := h.PausedThresholds()
	out := make([]PausedState, 0, len(h.Paused))
	for _, p := range h.Paused {
		st := PausedState{StagePause: p, For: max(h.Now.Sub(p.At), 0), Arrived: h.Arrived[p.Stage]}
		for _, c := range h.Live {
			if c.Stage == p.Stage && c.Status == queue.Pending {
				st.Pending += c.N
			}
		}
		st.Long, st.PilesUp = st.For > long, st.Arrived >= pile
		out = append(out, st)
	}
	return out
}

// BacklogAge is how long the oldest row of pepsi.ingress has waited; 0
// when none does.
func (h *Health) BacklogAge() time.Duration {
	if h.Backlog.Rows == 0 || h.Backlog.Oldest == nil {
		return 0
	}
	return h.Backlog.Now.Sub(*h.Backlog.Oldest)
}

// BacklogStatus judges the ingress backlog: FAIL past IngressFailPolls ×
// POLL_INTERVAL, WARN past IngressWarnPolls × (and a second), else OK.
func (h *Health) BacklogStatus() string {
	age, poll := h.BacklogAge(), h.Config.PollInterval
	switch {
	case age > IngressFailPolls*poll:
		return StatusFail
	case age > max(IngressWarnPolls*poll, time.Second):
		return StatusWarn
	}
	return StatusOK
}

// NoJanitor reports whether dispatchers run and none holds the janitor
// lock: retention, the vacuum check and the schedules do not run.
func (h *Health) NoJanitor() bool { return h.DispatcherRuns() && h.Janitor == nil }

// WakeNeverSet reports whether the wake flag was never set (a server crash
// since a dispatcher last ran) while no dispatcher runs: every enqueue
// notifies.
func (h *Health) WakeNeverSet() bool { return h.Wake.Counter == nil && !h.DispatcherRuns() }

// setOwned reports whether a running dispatcher owns the wake row of set.
func (h *Health) setOwned(set string) bool {
	if set == queue.AllStages {
		return h.Dispatchers.Holder != nil
	}
	for _, s := range strings.Split(set, ",") {
		if h.Owner(s) == nil {
			return false
		}
	}
	return true
}

// StaleWake are the armed wake sets no running dispatcher owns (one killed
// while idle): every enqueue notifies for them.
func (h *Health) StaleWake() []string {
	var out []string
	for _, r := range h.Wake.Rows {
		if r.Armed && !h.setOwned(r.Set) {
			out = append(out, r.Set)
		}
	}
	return out
}

// ScheduleState is one [schedule-NAME] as the model judges it.
type ScheduleState struct {
	Schedule *config.Schedule
	Run      queue.ScheduleRun // its row; only the name when it has none
	Seen     bool              // a dispatcher has run it: it has a row
	Next     time.Time         // its next slot; zero when none
	// Overdue is its latest slot past ScheduleLate (or 2 × POLL_INTERVAL)
	// that was not enqueued; zero when none is.
	Overdue time.Time
}

// Skipped reports whether its last slot was skipped: its message refused.
func (s ScheduleState) Skipped() bool { return s.Seen && s.Run.Skipped() }

// ScheduleStates judges each configured schedule, in the configuration's
// order.
func (h *Health) ScheduleStates() []ScheduleState {
	byName := map[string]queue.ScheduleRun{}
	for _, r := range h.Schedules {
		byName[r.Name] = r
	}
	late := max(2*h.Config.PollInterval, ScheduleLate)
	out := make([]ScheduleState, 0, len(h.Config.Schedules))
	for i := range h.Config.Schedules {
		s := &h.Config.Schedules[i]
		st := ScheduleState{Schedule: s, Run: queue.ScheduleRun{Name: s.Name}}
		if r, ok := byName[s.Name]; ok {
			st.Run, st.Seen = r, true
		}
		st.Next = s.Next(h.Now)
		r := st.Run
		if due := s.Latest(h.Now.Add(-late)); st.Seen && !due.IsZero() && due.After(r.Since) && (r.LastSlot == nil || due.After(*r.LastSlot)) {
			st.Overdue = due
		}
		out = append(out, st)
	}
	return out
}
