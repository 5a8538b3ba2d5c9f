package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// retry puts messages back to pending as pepsi queue retry does (its
// code, admin.DB's Redrive): one message (id), or the messages of a status
// (and stage, and failure group); at another stage and with another
// priority when asked. Ticked messages and the other filters of a list go
// through the selection repairs (selectionAction).
type retry struct {
	params admin.RedriveParams
	change string // the change in words, for a confirmation of one message
}

func (d *Dashboard) parseRetry(r *http.Request) (action, actionPage, error) {
	var page actionPage
	p, err := parsePick(r)
	if err != nil {
		return nil, page, err
	}
	c, err := parseChange(r, d.opts.Stages)
	if err != nil {
		return nil, page, err
	}
	page.What = p.what()
	if w := c.what(); w != "" {
		page.What += ", " + w
	}
	page.Fields = append(p.fields(), c.fields()...)
	at := c.ToStage
	if at == "" {
		at = p.Stage
	}
	page.Next = queryOf("/messages", "stage", at, "status", string(queue.Pending))
	switch {
	case p.Scope == "" && len(p.IDs) == 1:
		// One message, as the message page and pepsi queue retry ID ask.
		id := p.IDs[0]
		page.id = id
		page.Next = "/messages/" + strconv.FormatInt(id, 10)
		return &retry{params: admin.RedriveParams{IDs: []int64{id}, ToStage: c.ToStage, Priority: c.Priority}, change: c.what()}, page, nil
	case p.ticked():
		return d.bulk(&selectionAction{kind: "retry", sel: p.selection(), change: c}, "retry", p, c, false, r), page, nil
	}
	if p.status == "" {
		return nil, page, errors.New(`status: unknown status "": a retry of a list's messages takes a status (failed, paused, done or running)`)
	}
	if p.status == queue.Pending {
		return nil, page, errors.New("status pending: pending messages are queued already")
	}
	if p.Older == "" && p.Newer == "" && p.Text == "" && p.parent == 0 && !p.searches() {
		// pepsi queue retry --status S [--stage NAME] (and a failure group).
		a := &retry{params: admin.RedriveParams{Status: p.status, Stage: p.Stage, Reason: p.Reason, ToStage: c.ToStage, Priority: c.Priority}}
		return d.bulk(a, "retry", p, c, false, r), page, nil
	}
	return d.bulk(&selectionAction{kind: "retry", sel: p.selection(), change: c}, "retry", p, c, false, r), page, nil
}

func (a *retry) count(ctx context.Context, db *admin.DB, page *actionPage) error {
	if page.id == 0 {
		p := a.params
		p.DryRun = true
		res, err := db.Redrive(ctx, p)
		if err != nil {
			return err
		}
		page.Count = res.Changed
		held(page, res)
		return nil
	}
	m, err := db.Show(ctx, page.id)
	if err != nil {
		return err
	}
	page.What = "message " + strconv.FormatInt(page.id, 10) + " (" + string(m.Status) + " at stage " + m.Stage + ")"
	if a.change != "" {
		page.What += ", " + a.change
	}
	switch m.Status {
	case queue.Pending:
		page.Pending = 1
	case queue.Running:
		// Held while a dispatcher owns the stage it was handed out at
		// (one of every stage, or the one whose set has it), as Redrive
		// decides.
		disp, err := db.RunningOwner(ctx, page.id)
		if err != nil {
			return err
		}
		if disp != nil {
			held(page, admin.Repair{Held: 1, Holder: disp})
			return nil
		}
		page.Count = 1
	default:
		page.Count = 1
	}
	return nil
}

func (a *retry) do(ctx context.Context, db *admin.DB, page *actionPage) error {
	res, err := db.Redrive(ctx, a.params)
	if err != nil {
		return err
	}
	page.Count, page.Pending = res.Changed, res.Pending
	held(page, res)
	return nil
}
