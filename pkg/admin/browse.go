package admin

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The queries of pepsi httpd's dashboard: messages newest first, paged by
// id, and failed messages grouped by reason.

// reasonSQL is a failed message's reason as a failure group sees it: the
// first GroupReasonMax characters of its error, or of the dispatcher's
// when the stage wrote none, or "(none)", with every run of digits read
// as N, so that "order 1234: no stock" and "order 98: no stock" are one
// group (as the demo's summary groups them). A reason is never empty.
// FoldReason is the same in Go.
const reasonSQL = `regexp_replace(` + rawReasonSQL + `, '[0-9]+', 'N', 'g')`

// rawReasonSQL is a failed message's reason before its digits are read
// as N. Only its start is read (substr reads a slice of a long, toasted
// value, where left would read it whole): a group is named by the start of
// its error, and grouping must not read and hash a megabyte per message.
const rawReasonSQL = `substr(coalesce(nullif(error, ''), nullif(dispatch_error, ''), '(none)'), 1, ` + groupReasonMax + `)`

// GroupReasonMax is how many characters of an error name its failure
// group: at most 1000 bytes, which the dashboard's reason filter takes.
const GroupReasonMax = 250

const groupReasonMax = "250" // GroupReasonMax

// failureCountsSQL is the failure groups with their counts (stage, reason,
// n), as a subquery: pepsi.failure_groups and the deltas not yet folded
// into it (sql/028_failure_groups.sql).
const failureCountsSQL = `(SELECT stage, reason, sum(n)::bigint AS n
          FROM (SELECT stage, reason, n FROM pepsi.failure_groups
                UNION ALL
                SELECT stage, reason, n FROM pepsi.failure_delta) d
         GROUP BY 1, 2
        HAVING sum(n) > 0)`

// reasonIs is the condition that a message's reason (reasonSQL) is the
// argument reason (added with arg): first the raw reason LIKE the reason
// with each N any text (an N stands for digits or itself), a test that
// costs a tenth of the regular expression and that only the group's
// messages and a few others pass, then the regular expression on those.
func reasonIs(reason string, arg func(any) string) string {
	like := strings.ReplaceAll(likeEscaper.Replace(reason), "N", "%")
	return "CASE WHEN " + rawReasonSQL + " LIKE " + arg(like) + " THEN " + reasonSQL + " = " + arg(reason) + " ELSE false END"
}

var digits = regexp.MustCompile(`[0-9]+`)

// likeEscaper makes text match itself in a LIKE pattern.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// FoldReason returns the failure group reason of a message with these
// errors: what reasonSQL computes in the database.
func FoldReason(errText, dispatchErr *string) string {
	s := "(none)"
	switch {
	case errText != nil && *errText != "":
		s = *errText
	case dispatchErr != nil && *dispatchErr != "":
		s = *dispatchErr
	}
	return digits.ReplaceAllString(cutRunes(s, GroupReasonMax), "N")
}

// cutRunes is the first n characters of s.
func cutRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// MaxErrorList is how many characters of a message's error and
// dispatch_error Browse and List return, the last of them "…" when the
// text is longer; Show returns up to MaxErrorShow.
const MaxErrorList = 300

// MaxErrorShow is how many characters of a message's error and
// dispatch_error Show returns, the last of them "…" when the text is
// longer: as much as a stage's status line carries (64 KiB), and more
// than pepsi.fail keeps.
const MaxErrorShow = 64 << 10

// BrowseParams filters and pages Browse; zero values do not filter.
type BrowseParams struct {
	Stage     string
	Status    queue.Status
	OlderThan time.Duration // last updated at least this long ago
	NewerThan time.Duration // last updated less than this long ago
	Text      string        // in the error or the dispatch_error, any case
	Reason    string        // in this failure group (see FoldReason)
	Parent    int64         // children of this message (0: any)
	Search                  // in the headers and payload, within a time bound
	Before    int64         // ids below this (the next, older page)
	After     int64         // ids above this (the previous, newer page); ignored with Before
	Limit     int           // rows per page (at most 1000; 0 means 50)
}

// BrowsePage is one page of Browse, newest first.
type BrowsePage struct {
	Rows  []Row `json:"rows"`
	Older bool  `json:"older"` // more rows may match below OlderBefore
	Newer bool  `json:"newer"` // more rows may match above NewerAfter
	// OlderBefore and NewerAfter are where the older and the newer page
	// start: the last and the first row's ids, or, for a search that
	// stopped short of its window's end, the bound of what it read.
	OlderBefore int64 `json:"older_before,omitempty"`
	NewerAfter  int64 `json:"newer_after,omitempty"`
	// Searched is, for a search, the part of its window the page read;
	// Cut says the window goes on beyond it, unread (see SearchBudget).
	Searched *SearchRange `json:"searched,omitempty"`
	Cut      bool         `json:"search_cut,omitempty"`
}

// Browse returns a page of the messages that match p, newest (highest id)
// first, with their error texts cut to MaxErrorList bytes.
//
// The statement is built for the filters given, with the status as a
// literal, so that the planner can use the partial index of that status
// (state_pending, state_running, state_failed) whatever plan it caches;
// the page of state rows is found before the join with pepsi.message, so
// that the join does not walk message_pkey along the rows skipped.
func (db *DB) Browse(ctx context.Context, p BrowseParams) (BrowsePage, error) {
	if p.Status != "" && !slices.Contains(queue.Statuses, p.Status) {
		return BrowsePage{}, fmt.Errorf("unknown status %q", p.Status)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	if err := db.resolve(ctx, &p.Search); err != nil {
		return BrowsePage{}, err
	}
	if p.Search.searches() || p.Text != "" || p.Unindexed() {
		return db.browseSearch(ctx, p, limit)
	}
	newer := p.Before == 0 && p.After > 0
	var got []Row
	err := db.read(ctx, &p.Search, func(q querier) error {
		var err error
		got, err = browseRows(ctx, q, p, limit+1, newer)
		return err
	})
	if err != nil {
		return BrowsePage{}, err
	}
	page := BrowsePage{Rows: got}
	more := len(got) > limit
	if more {
		page.Rows = got[:limit]
	}
	if newer {
		slices.Reverse(page.Rows)
		page.Newer, page.Older = more, true
	} else {
		page.Older, page.Newer = more, p.Before > 0
	}
	page.edges()
	return page, nil
}

// edges sets where the older and newer pages start from the page's rows
// (when a search has not set them), and makes Rows an empty list rather
// than none.
func (page *BrowsePage) edges() {
	if page.Rows == nil {
		page.Rows = []Row{}
	}
	if n := len(page.Rows); n > 0 {
		if page.Older && page.OlderBefore == 0 {
			page.OlderBefore = page.Rows[n-1].ID
		}
		if page.Newer && page.NewerAfter == 0 {
			page.NewerAfter = page.Rows[0].ID
		}
	}
}

// browseRows reads up to n rows of p's filters, newest first (oldest
// first when newer), below p.Before or, when newer, above p.After.
func browseRows(ctx context.Context, q querier, p BrowseParams, n int, newer bool) ([]Row, error) {
	var st statement
	arg := st.arg
	where, err := p.Selection().conds(arg)
	if err != nil {
		return nil, err
	}
	from := "pepsi.state"
	if t := ownPartition(p.Status); t != "" {
		from = t
		where = slices.DeleteFunc(where, func(c string) bool { return c == statusIs(p.Status) })
	}
	order := "DESC"
	switch {
	case p.Before > 0:
		where = append(where, "id < "+arg(p.Before))
	case newer:
		where = append(where, "id > "+arg(p.After))
		order = "ASC"
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	sql := `SELECT ` + rowColumns(MaxErrorList) + `
	          FROM (SELECT * FROM ` + from + ` state ` + cond + ` ORDER BY id ` + order + ` LIMIT ` + strconv.Itoa(n) + `) s
	          JOIN pepsi.message m USING (id)
	         ORDER BY s.id ` + order
	// Planned for the values given (QueryExecModeExec: an unnamed
	// statement), never by a cached generic plan: a filter that matches
	// few rows wants a scan of them, one that matches many the id order,
	// and a generic plan, which cannot tell, takes the id order for both
	// (0.5 s for a stage with no done message among 850 000).
	rows, err := q.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, st.args...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRow)
}

// Unindexed says p filters by what no index of the done messages holds,
// their stage alone: a list of a stage's done messages (or of all its
// messages) reads the done rows in id order, and one of a stage that few
// match reads them all. It reads in slices, as a search does (see
// browseSearch).
func (p *BrowseParams) Unindexed() bool {
	return p.Stage != "" && (p.Status == "" || p.Status == queue.Done) && p.Parent == 0 && p.Text == "" && p.Reason == ""
}

// Selection is p's filters, as a selection (without its paging).
func (p *BrowseParams) Selection() Selection {
	return Selection{Stage: p.Stage, Status: p.Status, OlderThan: p.OlderThan, NewerThan: p.NewerThan,
		Text: p.Text, Reason: p.Reason, Parent: p.Parent, Search: p.Search}
}

// FailureGroup is the failed messages of one stage with one reason.
type FailureGroup struct {
	Stage    string    `json:"stage"`
	Reason   string    `json:"reason"` // see FoldReason
	Count    int64     `json:"count"`
	Newest   time.Time `json:"newest"`    // when the latest of them failed
	NewestID int64     `json:"newest_id"` // the latest of them to fail (of those, the highest id)
}

// FailureGroups returns the failed messages grouped by stage and reason,
// the largest groups first, at most limit of them (0: 500); stage, when
// set, keeps one stage's.
func (db *DB) FailureGroups(ctx context.Context, stage string, limit int) ([]FailureGroup, error) {
	if limit <= 0 {
		limit = 500
	}
	// The counts are pepsi.failure_groups' and the deltas not yet folded
	// into it (sql/028_failure_groups.sql), which only the failed
	// messages' own moves write; each group's newest message is one probe
	// of state_failed_group_at. No failed message is read but those.
	rows, err := db.pool.Query(ctx, `
SELECT g.stage, g.reason, g.n, l.updated_at, l.id
  FROM (SELECT * FROM `+failureCountsSQL+` x
         WHERE $1 = '' OR stage = $1
         ORDER BY 3 DESC, 1, 2
         LIMIT $2) g
 CROSS JOIN LATERAL (SELECT updated_at, id FROM pepsi.state_failed
                      WHERE stage = g.stage AND (`+reasonSQL+` COLLATE "C") = g.reason
                      ORDER BY updated_at DESC, id DESC LIMIT 1) l
 ORDER BY 3 DESC, 1, 2`, stage, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailureGroup, error) {
		var g FailureGroup
		err := r.Scan(&g.Stage, &g.Reason, &g.Count, &g.Newest, &g.NewestID)
		return g, err
	})
}

// PayloadHead returns the first n bytes of a message's payload and its
// whole size, or ErrNotFound.
func (db *DB) PayloadHead(ctx context.Context, id int64, n int) ([]byte, int64, error) {
	var head []byte
	var size int64
	err := db.pool.QueryRow(ctx, "SELECT substring(payload FROM 1 FOR $2), octet_length(payload) FROM pepsi.message WHERE id = $1", id, n).Scan(&head, &size)
	if err == pgx.ErrNoRows {
		return nil, 0, ErrNotFound
	}
	return head, size, err
}
