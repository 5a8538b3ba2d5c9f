package dispatch

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// fakeQueue is an in-memory queue behind the Store and LockSession
// contracts, for running the whole loop without a database: claims hand
// out its pending rows, settles apply verdicts, statistics writes add up.
// It keeps what the loop relies on of pkg/queue's statements (claims in id
// order, a settle reporting each row's status before and after it, writes
// of statistics applied once) and no more: no KEY, no priorities, no
// ingress table, no schedules.
type fakeQueue struct {
	mu       sync.Mutex
	rows     map[int64]*fakeRow
	lastID   int64
	xid      int64 // counts turns: a snapshot's horizon
	armed    bool  // the wake flag: producers notify
	global   queue.DispatchStats
	stages   map[string]*queue.StageStats
	applied  map[int64]int64 // the last statistics write applied, by token
	notify   chan struct{}   // notifications for the session
	session  *fakeSession    // the last one dialled
	dials    int             // sessions dialled
	woken    int             // notifications a session heard
	failures int             // statements and dials failed by an outage

	// fault, when set, is asked before a turn (committed false) and after
	// it has been applied (true); an error it returns is the turn's.
	fault    func(t *queue.Turn, res *queue.TurnResult, committed bool) error
	downTill time.Time // every statement and dial fails until then
}

// fakeRow is one message's state row.
type fakeRow struct {
	stage    string
	status   queue.Status
	handed   string    // the stage it was claimed at, while running
	since    time.Time // when it was claimed
	due      time.Time // when a paused row falls due
	attempts int
	reason   string // dispatch_error
	pass     int64  // the token of its last claim
	ended    int64  // the last pass settled, booked as endedAs
	endedAs  queue.Outcome
}

// errFakeOutage is what the fake's statements fail with while it is down:
// an error without SQLSTATE, as a broken connection gives.
var errFakeOutage = errors.New("fake queue: connection reset by peer")

func newFakeQueue() *fakeQueue {
	return &fakeQueue{rows: make(map[int64]*fakeRow), stages: make(map[string]*queue.StageStats),
		applied: make(map[int64]int64), notify: make(chan struct{}, 1)}
}

// enqueue adds n pending messages at stage, notifying while armed as
// pepsi's ingress trigger does.
func (q *fakeQueue) enqueue(stage string, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for range n {
		q.lastID++
		q.rows[q.lastID] = &fakeRow{stage: stage, status: queue.Pending}
	}
	if q.armed {
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
}

// goDown makes every statement and dial fail for d from now, and the
// current session with them. The caller holds q.mu.
func (q *fakeQueue) goDown(d time.Duration) {
	q.downTill = time.Now().Add(d)
	if q.session != nil {
		q.session.fail()
	}
}

// down reports whether the fake is down now, counting the failure. The
// caller holds q.mu.
func (q *fakeQueue) down() error {
	if time.Now().Before(q.downTill) {
		q.failures++
		return errFakeOutage
	}
	return nil
}

// do runs fn under q's lock, unless q is down.
func (q *fakeQueue) do(fn func()) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.down(); err != nil {
		return err
	}
	fn()
	return nil
}

// check is do for the statements that need no more of the fake's state.
func (q *fakeQueue) check() error { return q.do(func() {}) }

// count returns how many rows are in each status, and at which stages.
func (q *fakeQueue) count() (status map[queue.Status]int, stages map[string]int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	status, stages = make(map[queue.Status]int), make(map[string]int)
	for _, r := range q.rows {
		status[r.status]++
		stages[r.stage]++
	}
	return status, stages
}

// RunTurn applies t's parts in pkg/queue's order, all or nothing.
func (q *fakeQueue) RunTurn(_ context.Context, t queue.Turn, res *queue.TurnResult) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	res.Resumed, res.Admitted, res.NextPaused, res.Xmin, res.Xmax = 0, 0, time.Time{}, 0, 0
	res.Settled, res.Claimed = res.Settled[:0], res.Claimed[:0]
	if err := q.down(); err != nil {
		return err
	}
	if q.fault != nil {
		if err := q.fault(&t, res, false); err != nil {
			return err
		}
	}
	now := time.Now()
	q.xid++
	if t.Arm != queue.ArmKeep {
		q.armed = t.Arm == queue.ArmOn
	}
	if t.Resume {
		q.resume(t.Stages, now, res)
	}
	for _, v := range t.Settles {
		if r := q.rows[v.ID]; r != nil {
			res.Settled = append(res.Settled, q.settle(v.ID, r, v, now))
		}
	}
	if t.Snapshot {
		res.Xmin, res.Xmax = q.xid, q.xid
	}
	for _, c := range t.Caps {
		res.Claimed = q.claim(c, t.Pass, now, res.Claimed)
	}
	if q.fault != nil {
		return q.fault(&t, res, true)
	}
	return nil
}

// resume makes the due paused rows at stages (nil: any) pending.
func (q *fakeQueue) resume(stages []string, now time.Time, res *queue.TurnResult) {
	for _, r := range q.rows {
		if r.status != queue.Paused || (stages != nil && !slices.Contains(stages, r.stage)) {
			continue
		}
		if now.Before(r.due) {
			res.NextPaused = earliest(res.NextPaused, r.due)
			continue
		}
		r.status = queue.Pending
		res.Resumed++
	}
}

// settle applies verdict v to row r as pkg/queue's settle does: only a
// row still running v's pass is changed, and each pass is booked once.
func (q *fakeQueue) settle(id int64, r *fakeRow, v queue.Settle, now time.Time) queue.Settled {
	s := queue.Settled{ID: id, Before: r.status, After: r.status, Stage: r.stage, Handed: v.Stage, Timeout: r.due}
	mine := r.pass == v.Pass
	switch {
	case r.ended == v.Pass && v.Pass != 0:
		s.Outcome = r.endedAs
		return s
	case !mine:
		s.Outcome = queue.OutReset // its claim was lost
		return s
	case r.status != queue.Running:
		s.Outcome = map[queue.Status]queue.Outcome{queue.Done: queue.OutDone, queue.Failed: queue.OutFailed,
			queue.Cancelled: queue.OutCancelled}[r.status]
		if s.Outcome == 0 {
			s.Outcome = queue.OutPaused
		}
		r.handed, r.ended, r.endedAs = "", v.Pass, s.Outcome
		return s
	}
	advanced := r.stage != v.Stage || v.Verdict == queue.Advance && v.Next != v.Stage
	switch {
	case r.stage != v.Stage || v.Verdict == queue.Advance:
		if r.stage == v.Stage {
			r.stage = v.Next
		}
		r.status, r.attempts = queue.Pending, 0
	case v.Verdict == queue.Finish:
		r.status = queue.Done
	case v.Verdict == queue.Pause:
		r.status, r.due = queue.Paused, now.Add(v.Delay)
	case v.Verdict == queue.NotRun:
		r.status, r.attempts = queue.Pending, max(r.attempts-1, 0)
		if v.Delay > 0 {
			r.status, r.due = queue.Paused, now.Add(v.Delay)
		}
		if v.Reason != "" {
			r.reason = v.Reason
		}
	case v.Verdict == queue.PassFailed && max(r.attempts, 1) <= v.Retry.Retries:
		r.status, r.due = queue.Paused, now.Add(min(v.Retry.Delay<<max(r.attempts-1, 0), v.Retry.Max))
	default:
		r.status, r.reason = queue.Failed, v.Reason
	}
	r.handed = ""
	s.After, s.Stage, s.Timeout = r.status, r.stage, r.due
	s.Outcome = map[queue.Status]queue.Outcome{queue.Done: queue.OutDone, queue.Failed: queue.OutFailed,
		queue.Paused: queue.OutPaused, queue.Pending: queue.OutReset}[r.status]
	if advanced {
		s.Outcome = queue.OutRequeued
	}
	r.ended, r.endedAs = v.Pass, s.Outcome
	return s
}

// claim moves up to c.Cap pending rows at c.Stage to running, lowest ids
// first, and appends them to dst.
func (q *fakeQueue) claim(c queue.StageCap, pass int64, now time.Time, dst []queue.Claimed) []queue.Claimed {
	var ids []int64
	for id, r := range q.rows {
		if r.status == queue.Pending && r.stage == c.Stage {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids[:min(len(ids), c.Cap)] {
		r := q.rows[id]
		r.status, r.handed, r.since, r.pass = queue.Running, c.Stage, now, pass
		r.attempts++
		dst = append(dst, queue.Claimed{ID: id, Stage: c.Stage, Pass: pass})
	}
	return dst
}

// reset makes running rows pending: those handed out at stages (nil: any),
// not in held, claimed at least age ago.
func (q *fakeQueue) reset(held []int64, age time.Duration, stages []string) int64 {
	var n int64
	now := time.Now()
	for id, r := range q.rows {
		if r.status != queue.Running || (stages != nil && !slices.Contains(stages, r.handed)) ||
			slices.Contains(held, id) || now.Sub(r.since) < age {
			continue
		}
		r.status, r.handed = queue.Pending, ""
		n++
	}
	return n
}

func (q *fakeQueue) ResetOrphans(_ context.Context, held []int64, olderThan time.Duration, stages ...string) (n int64, err error) {
	err = q.do(func() { n = q.reset(held, olderThan, stages) })
	return n, err
}

func (q *fakeQueue) ResetRunning(_ context.Context, stages ...string) (n int64, err error) {
	err = q.do(func() { n = q.reset(nil, 0, stages) })
	return n, err
}

func (q *fakeQueue) AddStatsOnce(_ context.Context, flushes []queue.StatsFlush) error {
	return q.do(func() { q.addStats(flushes) })
}

func (q *fakeQueue) SetArmed(_ context.Context, _ string, on bool) error {
	return q.do(func() { q.armed = on })
}

// addStats adds each write of flushes that was not applied before.
func (q *fakeQueue) addStats(flushes []queue.StatsFlush) {
	for _, f := range flushes {
		if f.Seq <= q.applied[f.Token] {
			continue
		}
		q.applied[f.Token] = f.Seq
		addCounts(&q.global, f.Global)
		for _, s := range f.Stages {
			t := q.stages[s.Stage]
			if t == nil {
				t = &queue.StageStats{Stage: s.Stage}
				q.stages[s.Stage] = t
			}
			addCounts(t, s)
		}
	}
}

// addCounts adds each number of src to the same field of dst, as the
// statistics tables add each write's deltas.
func addCounts[T any](dst *T, src T) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src)
	for i := range d.NumField() {
		switch f := d.Field(i); f.Kind() {
		case reflect.Int64:
			f.SetInt(f.Int() + s.Field(i).Int())
		case reflect.Float64:
			f.SetFloat(f.Float() + s.Field(i).Float())
		}
	}
}

// The statements the fake runs without a state of their own.

func (q *fakeQueue) CheckSchema(context.Context) error { return q.check() }
func (q *fakeQueue) SetFence(int64, []string)          {}
func (q *fakeQueue) NewPassTokens(context.Context) (queue.PassTokens, error) {
	return queue.PassTokens{}, q.check()
}
func (q *fakeQueue) Reset() {}
func (q *fakeQueue) Close() {}
func (q *fakeQueue) TableChurn(context.Context, string) (queue.Churn, error) {
	return queue.Churn{}, q.check()
}
func (q *fakeQueue) Vacuum(context.Context, string) error { return q.check() }
func (q *fakeQueue) Stalenesses(context.Context) ([]queue.Staleness, error) {
	return nil, q.check()
}
func (q *fakeQueue) Analyze(context.Context, string) error       { return q.check() }
func (q *fakeQueue) FoldFailures(context.Context) (int64, error) { return 0, q.check() }

func (q *fakeQueue) SweepJoins(context.Context, []string) ([]queue.Joined, error) {
	return nil, q.check()
}

func (q *fakeQueue) SetFlowKeys(context.Context, []string, []queue.FlowKey) ([]string, int64, error) {
	return nil, 0, q.check()
}

func (q *fakeQueue) DoneAhead(context.Context, time.Duration, int) (int, error) { return 0, q.check() }

func (q *fakeQueue) MessageAhead(context.Context, int64, int) (int, int64, error) {
	return 0, 0, q.check()
}

func (q *fakeQueue) ExpireDone(_ context.Context, at queue.ExpireAt, _ time.Duration, _ int) (queue.ExpireAt, int64, bool, error) {
	return at, 0, false, q.check()
}

func (q *fakeQueue) RetireMessages(context.Context, int, int) (int, int64, error) {
	return 0, 0, q.check()
}

func (q *fakeQueue) FireSchedule(context.Context, queue.Occurrence) (queue.Fired, error) {
	return queue.Fired{}, errors.New("fake queue: no schedules")
}

func (q *fakeQueue) SkipSchedule(context.Context, queue.Occurrence) (bool, error) {
	return false, errors.New("fake queue: no schedules")
}

// openStore is Options.OpenStore for q.
func (q *fakeQueue) openStore(context.Context) (Store, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	return q, nil
}

// dialLock is Options.DialLock for q: a new session, unless q is down.
func (q *fakeQueue) dialLock(context.Context) (LockSession, error) {
	s := &fakeSession{q: q, gone: make(chan struct{})}
	err := q.do(func() { q.dials++; q.session = s })
	if err != nil {
		return nil, err
	}
	return s, nil
}

// fakeSession is a lock session of a fakeQueue: it always gets its locks,
// hears the queue's notifications and fails when the queue goes down.
type fakeSession struct {
	q    *fakeQueue
	once sync.Once
	gone chan struct{} // closed: the session failed
}

// fail ends the session, as a broken connection does.
func (s *fakeSession) fail() { s.once.Do(func() { close(s.gone) }) }

// alive is nil while the session is, errFakeOutage once it failed.
func (s *fakeSession) alive() error {
	select {
	case <-s.gone:
		return errFakeOutage
	default:
		return nil
	}
}

func (s *fakeSession) Wait(ctx context.Context, d time.Duration) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.gone:
		return false, errFakeOutage
	case <-s.q.notify:
		s.q.mu.Lock()
		s.q.woken++
		s.q.mu.Unlock()
		return true, nil
	case <-t.C:
		return false, nil
	}
}

func (s *fakeSession) CheckSession(context.Context) error           { return s.alive() }
func (s *fakeSession) CheckWorkerDSN(context.Context, string) error { return s.alive() }
func (s *fakeSession) Ping(context.Context) error                   { return s.alive() }
func (s *fakeSession) Listen(context.Context, bool) error           { return s.alive() }
func (s *fakeSession) Close(context.Context) error                  { s.fail(); return nil }

func (s *fakeSession) TryJanitor(context.Context) (bool, error) {
	err := s.alive()
	return err == nil, err
}

func (s *fakeSession) ConnectionLimit(context.Context) (queue.ConnLimit, error) {
	return queue.ConnLimit{MaxConnections: 1000}, s.alive()
}

func (s *fakeSession) StageKeyClash(context.Context, []string) (string, string, error) {
	return "", "", s.alive()
}

func (s *fakeSession) TakeStages(context.Context, []string, bool, int64) error { return s.alive() }
func (s *fakeSession) WaitFor(context.Context, string, bool) error             { return s.alive() }
func (s *fakeSession) Release(context.Context, string, bool) error             { return s.alive() }

func (s *fakeSession) StandbyWaits(context.Context, []string, bool) (bool, error) {
	return false, s.alive()
}

var (
	_ Store       = (*fakeQueue)(nil)
	_ LockSession = (*fakeSession)(nil)
)
