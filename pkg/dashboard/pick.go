package dashboard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// What an action's form picks: the messages ticked on a list (id, once per
// message), or every message a list's filters match (stage, status,
// older, newer, q, reason, and a search's header, payload and since), as
// scope says: "selected" (the ticked ones,
// the filters posted beside them not applying), "filter" (the filters, the
// ticked ones not applying), or "" (the form of the message page and of
// the failures, and of a client of its own: ids, or filters, not both).

// maxTicked bounds the messages one form may tick: a list's page.
const maxTicked = 1000

// pick is an action's selection as posted.
type pick struct {
	Scope string
	IDs   []int64
	// The filters, as posted and as read.
	Stage, Status, Older, Newer, Text, Reason string
	Headers                                   []string
	Payload, Since                            string
	Parent                                    string // the children of this message
	parent                                    int64
	status                                    queue.Status
	older, newer                              time.Duration
	search                                    admin.Search
}

// parsePick reads the selection of an action's form.
func parsePick(r *http.Request) (pick, error) {
	p := pick{
		Scope: r.PostFormValue("scope"), Stage: r.PostFormValue("stage"), Status: r.PostFormValue("status"),
		Older: r.PostFormValue("older"), Newer: r.PostFormValue("newer"), Text: r.PostFormValue("q"), Reason: r.PostFormValue("reason"),
		Headers: given(r.PostForm["header"]), Payload: r.PostFormValue("payload"), Since: r.PostFormValue("since"),
		Parent: r.PostFormValue("parent"),
	}
	switch p.Scope {
	case "", "selected", "filter":
	default:
		return p, fmt.Errorf("scope %q: want selected (the ticked messages) or filter (every message the filters match)", p.Scope)
	}
	ids := r.PostForm["id"]
	if len(ids) > maxTicked {
		return p, fmt.Errorf("id: at most %d messages at once (act on the filter instead)", maxTicked)
	}
	for _, s := range ids {
		id, err := parseID("id", s)
		if err != nil {
			return p, err
		}
		if id > 0 && !slices.Contains(p.IDs, id) {
			p.IDs = append(p.IDs, id)
		}
	}
	if len(p.Stage) > maxText || len(p.Text) > maxText || len(p.Reason) > maxText {
		return p, fmt.Errorf("stage, q and reason take at most %d bytes", maxText)
	}
	var err error
	if p.Status != "" {
		if p.status, err = queue.ParseStatus(p.Status); err != nil {
			return p, fmt.Errorf("status: %v", err)
		}
	}
	if p.older, err = parseAgeParam("older", p.Older); err != nil {
		return p, err
	}
	if p.parent, err = parseID("parent", p.Parent); err != nil {
		return p, err
	}
	if p.newer, err = parseAgeParam("newer", p.Newer); err != nil {
		return p, err
	}
	if p.search, err = parseSearch(p.Headers, p.Payload, p.Since); err != nil {
		return p, err
	}
	switch p.Scope {
	case "selected":
		if len(p.IDs) == 0 {
			return p, errors.New("no message is ticked: tick the messages to act on, or act on every message the filters match")
		}
	case "filter":
		p.IDs = nil
	case "":
		if len(p.IDs) > 0 && p.hasFilter() {
			return p, errors.New("give message ids, or a status (with a stage and a reason), not both")
		}
	}
	return p, nil
}

// ticked reports whether the pick is of ticked messages.
func (p pick) ticked() bool { return p.Scope == "selected" || (p.Scope == "" && len(p.IDs) > 0) }

func (p pick) hasFilter() bool {
	return p.Stage != "" || p.Status != "" || p.Older != "" || p.Newer != "" || p.Text != "" || p.Reason != "" || p.Parent != "" || p.searches()
}

// searches reports whether the pick has a search's filters, which only
// pkg/admin's selections take.
func (p pick) searches() bool { return len(p.Headers) > 0 || p.Payload != "" || p.Since != "" }

// selection is the pick as pkg/admin takes it.
func (p pick) selection() admin.Selection {
	if p.ticked() {
		return admin.Selection{IDs: p.IDs}
	}
	return admin.Selection{Stage: p.Stage, Status: p.status, OlderThan: p.older, NewerThan: p.newer, Text: p.Text, Reason: p.Reason, Parent: p.parent, Search: p.search}
}

// what says the pick in words.
func (p pick) what() string {
	if p.ticked() {
		if len(p.IDs) == 1 {
			return "message " + strconv.FormatInt(p.IDs[0], 10)
		}
		var ids []string
		for _, id := range p.IDs[:min(len(p.IDs), 8)] {
			ids = append(ids, strconv.FormatInt(id, 10))
		}
		s := "the " + strconv.Itoa(len(p.IDs)) + " ticked messages (" + strings.Join(ids, ", ")
		if len(p.IDs) > 8 {
			s += ", …"
		}
		return s + ")"
	}
	s := "every message"
	if p.Status != "" {
		s = "every " + p.Status + " message"
	}
	if p.Stage != "" {
		s += " at stage " + p.Stage
	}
	if p.Reason != "" {
		s += " failed with " + strconv.Quote(p.Reason)
	}
	if p.parent > 0 {
		s += " spawned by message " + strconv.FormatInt(p.parent, 10)
	}
	if p.Text != "" {
		s += " whose error contains " + strconv.Quote(p.Text)
	}
	if p.Older != "" {
		s += " unchanged for " + p.Older
	}
	if p.Newer != "" {
		s += " changed within " + p.Newer
	}
	for _, h := range p.Headers {
		s += " with the header " + strconv.Quote(h)
	}
	if p.Payload != "" {
		s += " whose payload contains " + strconv.Quote(p.Payload)
	}
	switch {
	case p.Since != "":
		s += " enqueued within " + p.Since
	case p.searches():
		s += " enqueued within " + admin.DefaultSince.String()
	}
	return s
}

// fields are the pick's fields, for its confirmation to post again.
func (p pick) fields() []field {
	out := []field{{"scope", p.Scope}}
	if p.ticked() {
		for _, id := range p.IDs {
			out = append(out, field{"id", strconv.FormatInt(id, 10)})
		}
		return out
	}
	out = append(out, field{"stage", p.Stage}, field{"status", p.Status}, field{"older", p.Older},
		field{"newer", p.Newer}, field{"q", p.Text}, field{"reason", p.Reason}, field{"payload", p.Payload}, field{"since", p.Since}, field{"parent", p.Parent})
	for _, h := range p.Headers {
		out = append(out, field{"header", h})
	}
	return out
}

// change is what an action does besides its selection: a retry's stage
// and priority.
type change struct {
	ToStage  string
	Priority *int32
}

// parseChange reads to_stage (one of the configured stages, when there
// are any, as pepsi queue retry --to-stage takes it) and priority.
func parseChange(r *http.Request, stages []string) (change, error) {
	var c change
	c.ToStage = r.PostFormValue("to_stage")
	if len(c.ToStage) > maxText {
		return c, fmt.Errorf("to_stage: at most %d bytes", maxText)
	}
	if c.ToStage != "" && len(stages) > 0 && !slices.Contains(stages, c.ToStage) {
		return c, fmt.Errorf("to_stage %q: no [stage-%s] in pepsi.conf", c.ToStage, c.ToStage)
	}
	if s := strings.TrimSpace(r.PostFormValue("priority")); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < math.MinInt32 || n > math.MaxInt32 {
			return c, fmt.Errorf("priority %q: want an integer from %d to %d (lower is claimed first)", s, math.MinInt32, math.MaxInt32)
		}
		p := int32(n)
		c.Priority = &p
	}
	return c, nil
}

// what says the change in words, "" for none.
func (c change) what() string {
	var s []string
	if c.ToStage != "" {
		s = append(s, "at stage "+c.ToStage)
	}
	if c.Priority != nil {
		s = append(s, "with priority "+strconv.Itoa(int(*c.Priority)))
	}
	return strings.Join(s, " ")
}

func (c change) fields() []field {
	f := []field{{"to_stage", c.ToStage}}
	if c.Priority != nil {
		f = append(f, field{"priority", strconv.Itoa(int(*c.Priority))})
	}
	return f
}

// selectionAction is a retry or a purge of a pick through pkg/admin's
// selection repairs.
type selectionAction struct {
	kind   string // retry or purge
	sel    admin.Selection
	change change
}

func (a *selectionAction) run(ctx context.Context, db *admin.DB, page *actionPage, dry bool) error {
	var res admin.SelectionRepair
	var err error
	if a.kind == "retry" {
		res, err = db.RedriveSelection(ctx, a.sel, a.change.ToStage, a.change.Priority, dry)
	} else {
		res, err = db.PurgeSelection(ctx, a.sel, dry)
	}
	page.Count, page.Missing = res.Changed, res.Missing
	if a.kind == "retry" {
		page.Pending = res.Pending
	} else {
		page.Live = res.Skipped
	}
	held(page, res.Repair)
	if err != nil && !dry && res.Changed > 0 {
		return fmt.Errorf("%w (after changing %d messages)", err, res.Changed)
	}
	return err
}

func (a *selectionAction) count(ctx context.Context, db *admin.DB, page *actionPage) error {
	return a.run(ctx, db, page, true)
}

func (a *selectionAction) do(ctx context.Context, db *admin.DB, page *actionPage) error {
	return a.run(ctx, db, page, false)
}
