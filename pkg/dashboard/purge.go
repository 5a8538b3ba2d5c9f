package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// purge deletes done, failed or cancelled messages (of a stage) unchanged for at
// least an age, as pepsi queue purge does (its code, admin.DB's Purge).
// Ticked messages and the other filters of a list go through the selection
// repairs (selectionAction), which purge their done, failed and cancelled messages
// only.
type purge struct {
	params admin.PurgeParams
}

func (d *Dashboard) parsePurge(r *http.Request) (action, actionPage, error) {
	var page actionPage
	p, err := parsePick(r)
	if err != nil {
		return nil, page, err
	}
	page.What = p.what()
	page.Fields = p.fields()
	page.Next = queryOf("/messages", "stage", p.Stage, "status", p.Status)
	if p.ticked() {
		page.Next = "/messages"
		return d.bulk(&selectionAction{kind: "purge", sel: p.selection()}, "purge", p, change{}, false, r), page, nil
	}
	if !p.status.Finished() {
		if p.status == "" {
			return nil, page, errors.New(`status: unknown status "": the dashboard purges done, failed or cancelled messages only (give status=done, failed or cancelled)`)
		}
		return nil, page, fmt.Errorf("status %s: the dashboard purges done, failed or cancelled messages only (pepsi queue purge --force does the others)", p.status)
	}
	if p.Newer != "" || p.Text != "" || p.Reason != "" || p.parent > 0 || p.searches() {
		return d.bulk(&selectionAction{kind: "purge", sel: p.selection()}, "purge", p, change{}, false, r), page, nil
	}
	if p.Older == "" {
		if p.Scope != "filter" {
			return nil, page, errors.New("older: give an age, such as 7d (0 for every one)")
		}
		page.What += " (of any age)"
	}
	// pepsi queue purge --status S [--stage NAME] --older-than AGE.
	return d.bulk(&purge{params: admin.PurgeParams{Status: p.status, Stage: p.Stage, OlderThan: p.older}}, "purge", p, change{}, false, r), page, nil
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
