package dashboard

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// maxGroups is how many failure groups the page lists.
const maxGroups = 500

// groupRow is one failure group with the links to its messages.
type groupRow struct {
	admin.FailureGroup
	Messages string `json:"messages_url"` // the group's messages
	Newest   string `json:"newest_url"`   // its latest message
}

// failuresPage is the failures page's data.
type failuresPage struct {
	Stage   string     `json:"stage"` // the filter, "" for every stage
	Groups  []groupRow `json:"groups"`
	Total   int64      `json:"total"` // failed messages in the groups listed
	Stages  []string   `json:"-"`
	Refresh int        `json:"-"`
}

func (d *Dashboard) failures(w http.ResponseWriter, r *http.Request, db *admin.DB) {
	if !d.paramsOK(w, r) {
		return
	}
	refresh, ok := d.refreshParam(w, r, 0)
	if !ok {
		return
	}
	stage := r.FormValue("stage")
	if len(stage) > maxText {
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("stage: at most %d bytes", maxText))
		return
	}
	groups, err := db.FailureGroups(r.Context(), stage, maxGroups)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	read := time.Now()
	page := failuresPage{Stage: stage, Groups: []groupRow{}, Stages: d.opts.Stages, Refresh: refresh}
	for _, g := range groups {
		page.Total += g.Count
		page.Groups = append(page.Groups, groupRow{
			FailureGroup: g,
			Messages:     groupURL(g.Stage, g.Reason),
			Newest:       "/messages/" + strconv.FormatInt(g.NewestID, 10),
		})
	}
	d.render(w, r, http.StatusOK, "failures", view{Title: "Failures", Nav: "failures", Refresh: refresh, Updated: read, Page: page})
}

// groupURL is the messages list of one failure group.
func groupURL(stage, reason string) string {
	return queryOf("/messages", "stage", stage, "status", string(queue.Failed), "reason", reason)
}
