package admin

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// A page of a search, of a search of the errors' text, or of a list
// Unindexed reads its window (a search's; all ids for the others) in
// slices of ids, newest first (in
// the newer direction, oldest first), each twice the last, until it has
// its page of rows, reaches the window's end, or has spent SearchBudget:
// a header's value and a payload's text have no index (one would cost
// every enqueue), so a window of millions of messages cannot be read in
// the time a page has. A page cut short says how far it read; the next
// page goes on from there. A search's list counts its page only: a
// count would read what the page read again.

// SearchBudget is how long a page of a search reads its window before it
// stops short and says how far it read; the slice that passes it ends the
// page, and a slice is not begun when, twice as large as the last, it
// would pass it.
var SearchBudget = 80 * time.Millisecond

// ListBudget is SearchBudget for a list Unindexed, which is not a search:
// a page of a list has a quarter of the time a search has.
var ListBudget = 20 * time.Millisecond

// SearchSlice is how many message ids the first slice of a page of a
// search reads.
var SearchSlice int64 = 20_000

// SearchRange is the part of a search's window that a page of it read:
// the message ids from From up to, not including, To, and when the
// message From (or the first after it) was enqueued.
type SearchRange struct {
	From     int64     `json:"from_id"`
	To       int64     `json:"to_id"`
	FromTime time.Time `json:"from_enqueued_at"`
	Whole    bool      `json:"whole_window"` // the range is the whole window
}

// browseSearch is Browse of a search, of the errors' text, or of a list
// Unindexed (see above).
func (db *DB) browseSearch(ctx context.Context, p BrowseParams, limit int) (BrowsePage, error) {
	newer := p.Before == 0 && p.After > 0
	var page BrowsePage
	err := db.read(ctx, &p.Search, func(q querier) error {
		var top int64 // past the newest message
		if err := q.QueryRow(ctx, `SELECT coalesce(max(id), 0) + 1 FROM pepsi.message`).Scan(&top); err != nil {
			return err
		}
		lo, hi := max(p.Search.from, 1), top // the ids left to read: [lo, hi)
		switch {
		case newer:
			lo = max(lo, p.After+1)
		case p.Before > 0:
			hi = min(hi, p.Before)
		}
		budget := SearchBudget
		if !p.Search.searches() && p.Text == "" {
			budget = ListBudget
		}
		start, slice := time.Now(), SearchSlice
		var got []Row
		for lo < hi && len(got) <= limit {
			sp := p
			sp.Before, sp.After = 0, 0
			if newer {
				sp.Search.lo, sp.Search.hi = lo, min(hi, lo+slice)
			} else {
				sp.Search.lo, sp.Search.hi = max(lo, hi-slice), hi
			}
			began := time.Now()
			rows, err := browseRows(ctx, q, sp, limit+1-len(got), newer)
			if err != nil {
				return err
			}
			got = append(got, rows...)
			if newer {
				lo = sp.Search.hi
			} else {
				hi = sp.Search.lo
			}
			if time.Since(start)+2*time.Since(began) > budget {
				break
			}
			slice *= 2
		}
		page.Rows = got
		full := len(got) > limit
		if full {
			page.Rows = got[:limit]
		}
		page.Cut = !full && lo < hi
		r := SearchRange{From: hi, To: top}
		if p.Before > 0 {
			r.To = min(top, p.Before)
		}
		if newer {
			r = SearchRange{From: max(p.Search.from, p.After+1), To: lo}
			slices.Reverse(page.Rows)
			page.Newer, page.Older = full || page.Cut, true
			if page.Cut {
				page.NewerAfter = lo - 1
			}
		} else {
			page.Older, page.Newer = full || page.Cut, p.Before > 0
			if page.Cut {
				page.OlderBefore = hi
			}
		}
		err := q.QueryRow(ctx, `SELECT created_at FROM pepsi.message WHERE id >= $1 ORDER BY id LIMIT 1`, r.From).Scan(&r.FromTime)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		r.Whole = r.From <= max(p.Search.from, 1) && r.To >= top
		if p.Search.searches() || page.Cut {
			page.Searched = &r // a list that read it all says nothing more
		}
		return nil
	})
	if err != nil {
		return BrowsePage{}, err
	}
	page.edges()
	return page, nil
}
