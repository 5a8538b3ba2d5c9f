package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// retry puts messages back to pending as pepsi queue retry does: one
// message (id), or the messages of a status (and stage, and failure group).
type retry struct {
	params admin.RedriveParams
}

func parseRetry(r *http.Request) (action, actionPage, error) {
	var page actionPage
	a := &retry{}
	id, err := parseID("id", r.PostFormValue("id"))
	if err != nil {
		return nil, page, err
	}
	status, stage, reason := r.PostFormValue("status"), r.PostFormValue("stage"), r.PostFormValue("reason")
	if id > 0 {
		if status != "" || stage != "" || reason != "" {
			return nil, page, errors.New("give a message id, or a status (with a stage and a reason), not both")
		}
		a.params.IDs = []int64{id}
		page.id = id
		page.What = "message " + strconv.FormatInt(id, 10)
		page.Next = "/messages/" + strconv.FormatInt(id, 10)
		page.Fields = []field{{"id", strconv.FormatInt(id, 10)}}
		return a, page, nil
	}
	if a.params.Status, err = queue.ParseStatus(status); err != nil {
		return nil, page, fmt.Errorf("status: %v", err)
	}
	if a.params.Status == queue.Pending {
		return nil, page, errors.New("status pending: pending messages are queued already")
	}
	if len(stage) > maxText || len(reason) > maxText {
		return nil, page, fmt.Errorf("stage and reason take at most %d bytes", maxText)
	}
	a.params.Stage, a.params.Reason = stage, reason
	page.What = "every " + status + " message"
	if stage != "" {
		page.What += " at stage " + stage
	}
	if reason != "" {
		page.What += " failed with " + strconv.Quote(reason)
	}
	page.Next = queryOf("/messages", "stage", stage, "status", string(queue.Pending))
	page.Fields = []field{{"status", status}, {"stage", stage}, {"reason", reason}}
	return a, page, nil
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
	page.What += " (" + string(m.Status) + " at stage " + m.Stage + ")"
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
