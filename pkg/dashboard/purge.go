package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// purge deletes done or failed messages (of a stage) unchanged for at
// least an age, as pepsi queue purge does.
type purge struct {
	params admin.PurgeParams
}

func parsePurge(r *http.Request) (action, actionPage, error) {
	var page actionPage
	a := &purge{}
	p := &a.params
	status, err := queue.ParseStatus(r.PostFormValue("status"))
	if err != nil {
		return nil, page, fmt.Errorf("status: %v", err)
	}
	if status != queue.Done && status != queue.Failed {
		return nil, page, fmt.Errorf("status %s: the dashboard purges done or failed messages only (pepsi queue purge --force does the others)", status)
	}
	p.Status = status
	if p.Stage = r.PostFormValue("stage"); len(p.Stage) > maxText {
		return nil, page, fmt.Errorf("stage: at most %d bytes", maxText)
	}
	older := r.PostFormValue("older")
	if older == "" {
		return nil, page, errors.New("older: give an age, such as 7d (0 for every one)")
	}
	if p.OlderThan, err = parseAgeParam("older", older); err != nil {
		return nil, page, err
	}
	page.What = "every " + string(status) + " message"
	if p.Stage != "" {
		page.What += " at stage " + p.Stage
	}
	page.What += " unchanged for " + older
	page.Next = queryOf("/messages", "stage", p.Stage, "status", string(p.Status))
	page.Fields = []field{{"status", string(p.Status)}, {"stage", p.Stage}, {"older", older}}
	return a, page, nil
}

func (a *purge) count(ctx context.Context, db *admin.DB, page *actionPage) error {
	p := a.params
	p.DryRun = true
	res, err := db.Purge(ctx, p)
	page.Count = res.Changed
	return err
}

func (a *purge) do(ctx context.Context, db *admin.DB, page *actionPage) error {
	res, err := db.Purge(ctx, a.params)
	page.Count = res.Changed
	if err != nil && res.Changed > 0 {
		return fmt.Errorf("%v (after deleting %d messages)", err, res.Changed)
	}
	return err
}
