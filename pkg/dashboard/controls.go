package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The operator's controls as actions (issue 37): hold, release and cancel
// messages (one, the ticked ones, a list's filter, a failure group's), and
// pause and resume a stage, through admin.DB's Hold, Release, Cancel,
// PauseStage and ResumeStage, the code of pepsi queue hold, release,
// cancel, pause and resume, on behalf of the dashboard's user: a cancelled
// message's error says "cancelled by USER", a paused stage who paused it.

// maxControlled bounds the messages a control takes by id when pepsi queue
// cannot select them itself (a filter on age, text, a failure group or a
// search).
const maxControlled = 10000

// controlStatuses are the statuses each message control changes.
var controlStatuses = map[string][]queue.Status{
	"hold":    {queue.Pending, queue.Paused},
	"release": {queue.Held},
	"cancel":  {queue.Pending, queue.Paused, queue.Held, queue.Waiting},
}

// messageControl is a hold, release or cancel of a pick.
type messageControl struct {
	kind   string
	one    int64           // one message (404 when it does not exist)
	ticked []int64         // ticked messages (those gone are counted missing)
	sel    admin.Selection // else a filter: by status and stage, or resolved to ids
	byIDs  bool            // the filter is resolved to ids
	force  bool            // cancel running messages too
}

func (d *Dashboard) parseControl(kind string) func(*http.Request) (action, actionPage, error) {
	return func(r *http.Request) (action, actionPage, error) {
		var page actionPage
		p, err := parsePick(r)
		if err != nil {
			return nil, page, err
		}
		a := &messageControl{kind: kind, force: kind == "cancel" && r.PostFormValue("force") == "yes"}
		page.What = p.what()
		page.Fields = p.fields()
		if a.force {
			page.What += ", running or not"
			page.Fields = append(page.Fields, field{"force", "yes"})
		}
		page.Next = queryOf("/messages", "stage", p.Stage, "status", p.Status)
		switch {
		case p.Scope == "" && len(p.IDs) == 1:
			a.one, page.id = p.IDs[0], p.IDs[0]
			page.Next = "/messages/" + strconv.FormatInt(a.one, 10)
		case p.ticked():
			a.ticked = p.IDs
			page.Next = "/messages"
			return d.bulk(a, kind, p, change{}, a.force, r), page, nil
		default:
			want := controlStatuses[kind]
			if !slices.Contains(want, p.status) {
				return nil, page, fmt.Errorf("status %q: a %s of a list's messages takes a status of %s", p.Status, kind, statusList(want))
			}
			a.sel = p.selection()
			a.byIDs = p.Older != "" || p.Newer != "" || p.Text != "" || p.Reason != "" || p.searches() || p.parent > 0
			return d.bulk(a, kind, p, change{}, a.force, r), page, nil
		}
		return a, page, nil
	}
}

func statusList(sts []queue.Status) string {
	s := ""
	for i, st := range sts {
		switch {
		case i == 0:
		case i == len(sts)-1:
			s += " or "
		default:
			s += ", "
		}
		s += string(st)
	}
	return s
}

// params are the control's admin.ControlParams: the ids of the message,
// the ticked ones that exist, or the filter's (resolved now); or the
// filter's status and stage.
func (a *messageControl) params(ctx context.Context, db *admin.DB, page *actionPage) (admin.ControlParams, bool, error) {
	p := admin.ControlParams{By: page.User, Force: a.force}
	switch {
	case a.one > 0:
		p.IDs = []int64{a.one}
	case len(a.ticked) > 0:
		ids, _, err := db.SelectionIDs(ctx, admin.Selection{IDs: a.ticked}, maxTicked)
		if err != nil {
			return p, false, err
		}
		page.Missing = int64(len(a.ticked) - len(ids))
		p.IDs = ids
	case a.byIDs:
		ids, more, err := db.SelectionIDs(ctx, a.sel, maxControlled)
		if err != nil {
			return p, false, err
		}
		if more {
			return p, false, fmt.Errorf("%w: more than %d messages match; narrow the filter, or use pepsi queue %s --stage --status", errTooMany, maxControlled, a.kind)
		}
		p.IDs = ids
	default:
		p.Status, p.Stage = a.sel.Status, a.sel.Stage
	}
	return p, len(p.IDs) > 0 || p.Status != "", nil
}

// applyControl runs the control kind (hold, release, cancel) with p.
func applyControl(ctx context.Context, db *admin.DB, kind string, p admin.ControlParams) (admin.ControlResult, error) {
	switch kind {
	case "hold":
		return db.Hold(ctx, p)
	case "release":
		return db.Release(ctx, p)
	}
	return db.Cancel(ctx, p)
}

// errTooMany is a filter that matches more messages than a control takes
// by id.
var errTooMany = errors.New("too many messages")

func (a *messageControl) run(ctx context.Context, db *admin.DB, page *actionPage, dry bool) error {
	// A message may go between reading the ids and changing them: once
	// more with the ids of then.
	for try := 0; ; try++ {
		p, any, err := a.params(ctx, db, page)
		if err != nil || !any {
			return err
		}
		p.DryRun = dry
		res, err := applyControl(ctx, db, a.kind, p)
		if errors.Is(err, admin.ErrNotFound) && a.one == 0 && try == 0 {
			continue
		}
		if err != nil {
			return err
		}
		page.Count, page.Skipped = res.Changed, res.Skipped
		page.SkipWhy = "not " + statusList(controlStatuses[a.kind])
		if a.kind == "cancel" {
			held(page, admin.Repair{Held: res.Running, Holder: res.Holder})
		} else if res.Running > 0 {
			page.Skipped += res.Running
			page.SkipWhy += " (running ones among them)"
		}
		return nil
	}
}

func (a *messageControl) count(ctx context.Context, db *admin.DB, page *actionPage) error {
	return a.run(ctx, db, page, true)
}

func (a *messageControl) do(ctx context.Context, db *admin.DB, page *actionPage) error {
	return a.run(ctx, db, page, false)
}

// stageControl pauses or resumes a stage.
type stageControl struct {
	kind   string // pause or resume
	stage  string
	reason string
	known  func(context.Context, *admin.DB, string) (bool, error)
}

func (d *Dashboard) parseStageControl(kind string) func(*http.Request) (action, actionPage, error) {
	return func(r *http.Request) (action, actionPage, error) {
		var page actionPage
		a := &stageControl{kind: kind, stage: r.PostFormValue("stage"), reason: r.PostFormValue("reason"), known: d.knownStage}
		switch {
		case a.stage == "":
			return nil, page, errors.New("stage: give the stage to " + kind)
		case len(a.stage) > maxText || len(a.reason) > maxText:
			return nil, page, fmt.Errorf("stage and reason take at most %d bytes", maxText)
		case kind == "resume" && a.reason != "":
			return nil, page, errors.New("reason: a resume takes none")
		}
		page.Stage = a.stage
		page.What = "stage " + a.stage
		page.Fields = []field{{"stage", a.stage}}
		if kind == "pause" {
			page.Input = &field{"reason", a.reason}
		}
		page.Next = "/"
		return a, page, nil
	}
}

// knownStage reports whether stage is configured, or the database knows
// it (as pepsi queue pause decides: unfinished messages, statistics, a
// pause).
func (d *Dashboard) knownStage(ctx context.Context, db *admin.DB, stage string) (bool, error) {
	if slices.Contains(d.opts.Stages, stage) {
		return true, nil
	}
	return db.StageSeen(ctx, stage)
}

func (a *stageControl) count(ctx context.Context, db *admin.DB, page *actionPage) error {
	ok, err := a.known(ctx, db, a.stage)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: stage %q: not configured, and the database knows no such stage", errUnknownStage, a.stage)
	}
	paused, err := db.PausedStages(ctx)
	if err != nil {
		return err
	}
	for _, p := range paused {
		if p.Stage == a.stage {
			page.Pause = &p
		}
	}
	counts, _, err := db.LiveCounts(ctx)
	if err != nil {
		return err
	}
	for _, c := range counts {
		if c.Stage == a.stage && c.Status == queue.Pending {
			page.Waiting += c.N
		}
	}
	// What it changes: a stage, or nothing (paused already, or not paused).
	if (a.kind == "pause") == (page.Pause == nil) {
		page.Count = 1
	}
	return nil
}

func (a *stageControl) do(ctx context.Context, db *admin.DB, page *actionPage) error {
	if err := a.count(ctx, db, page); err != nil {
		return err
	}
	var p admin.StagePause
	var changed bool
	var err error
	if a.kind == "pause" {
		var already bool
		p, already, err = db.PauseStage(ctx, a.stage, page.User, a.reason)
		changed = !already
	} else {
		p, changed, err = db.ResumeStage(ctx, a.stage)
	}
	if err != nil {
		return err
	}
	page.Count = 0
	if changed {
		page.Count = 1
	}
	if a.kind == "pause" || changed {
		page.Pause = &p
	}
	if page.Pause != nil && page.Pause.Reason != "" {
		page.What += " (" + strconv.Quote(page.Pause.Reason) + ")"
	}
	return nil
}

// errUnknownStage is a stage to pause or resume that nothing knows.
var errUnknownStage = errors.New("unknown stage")
