package dashboard

import (
	"context"
	"encoding/hex"
	"strconv"
	"unicode/utf8"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// family fills in the message page's graph: its children by status, each
// count with its list (/messages?parent=ID&status=S), the newest
// childrenShown of them (one page of the list: admin.Browse, through the
// index of children), and its result's start.
func family(ctx context.Context, db *admin.DB, page *messagePage) error {
	m := page.Message
	if r := m.Result; r != nil {
		if utf8.Valid(r.Head) {
			page.ResultText = string(r.Head)
		} else {
			page.ResultHex = hex.Dump(r.Head)
		}
	}
	c := m.Children
	if c == nil {
		return nil
	}
	id := strconv.FormatInt(m.ID, 10)
	page.KidsURL = queryOf("/messages", "parent", id)
	for _, st := range queue.Statuses {
		if n := c.ByStatus[st]; n > 0 {
			page.Kids = append(page.Kids, cell{Status: string(st), N: n, URL: queryOf("/messages", "parent", id, "status", string(st))})
		}
	}
	res, err := db.Browse(ctx, admin.BrowseParams{Parent: m.ID, Limit: childrenShown})
	if err != nil {
		return err
	}
	for _, row := range res.Rows {
		page.KidRows = append(page.KidRows, listRow{Row: row, URL: "/messages/" + strconv.FormatInt(row.ID, 10)})
	}
	page.KidsMore = res.Older
	return nil
}
