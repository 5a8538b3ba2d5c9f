package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// actionTimeout bounds one action: a purge of millions of rows takes
// minutes. An action goes on when its request is gone (the browser tab
// closed); its end is logged.
const actionTimeout = 10 * time.Minute

// field is a form field a confirmation posts again.
type field struct{ Name, Value string }

// actionPage is a confirmation (Done false: what the action would touch)
// or a result (Done true: what it touched).
type actionPage struct {
	Action  string `json:"action"` // retry or purge
	What    string `json:"what"`   // the selection, in words
	Done    bool   `json:"done"`
	Count   int64  `json:"count"`                     // messages it would change, or changed
	Pending int64  `json:"already_pending,omitempty"` // retry: messages left alone, pending already
	Held    int64  `json:"held,omitempty"`            // running messages left alone: a dispatcher holds them
	HeldBy  string `json:"held_by,omitempty"`         // that dispatcher
	// Live are messages of a purge's selection left alone for being
	// unfinished (pending, running, paused).
	Live int64 `json:"live_left_alone,omitempty"`
	// Missing are ticked messages that no longer exist.
	Missing int64 `json:"missing,omitempty"`
	// Skipped are messages a hold, release or cancel left alone for their
	// status (SkipWhy says which it takes).
	Skipped int64  `json:"left_alone,omitempty"`
	SkipWhy string `json:"-"`
	// Confirmation is the token of a confirmation of several messages,
	// which its form posts back: the action takes the Count messages it
	// counted, and no other (see bulk).
	Confirmation string `json:"confirmation,omitempty"`
	// Confirmed are the messages the confirmation counted; Changed are
	// those of them left alone for having changed since, ChangedNow what
	// they are now ("3 done, 1 running").
	Confirmed  int64  `json:"confirmed,omitempty"`
	Changed    int64  `json:"changed_since_confirmation,omitempty"`
	ChangedNow string `json:"-"`
	// A pause or resume: the stage, its pause (as it is, or as it was
	// ended), and its pending messages.
	Stage   string            `json:"stage,omitempty"`
	Pause   *admin.StagePause `json:"pause,omitempty"`
	Waiting int64             `json:"pending_at_stage,omitempty"`
	// Input is a field the confirmation asks for (a pause's reason).
	Input     *field  `json:"-"`
	User      string  `json:"user"`
	Next      string  `json:"next_url"`             // where to see the messages
	ResultURL string  `json:"result_url,omitempty"` // the result's page, once done
	Fields    []field `json:"-"`
	Verb      verb    `json:"-"`

	id int64 // the message, for an action on one
}

// verb is how the pages speak of an action.
type verb struct {
	Do, Done string // "Retry", "Retried"
	What     string // what it does to the messages, before the selection
	Command  string // the pepsi command that does the same
}

var verbs = map[string]verb{
	"retry": {"Retry", "Retried", "Put back to pending, with attempts, timeout and errors cleared,", "pepsi queue retry"},
	"purge": {"Purge", "Purged", "Delete, payload and all,", "pepsi queue purge"},
	"hold": {"Hold", "Held", "Hold, so that they are never claimed until released, keeping their place (id, key, deduplication key),",
		"pepsi queue hold"},
	"release": {"Release", "Released", "Release, back to pending (or paused until their retry or scheduled time),", "pepsi queue release"},
	"cancel": {"Cancel", "Cancelled", "Cancel, ending them cancelled with the error \"cancelled by USER\" and their deduplication keys free again,",
		"pepsi queue cancel"},
	"pause":  {"Pause", "Paused", "Pause: every dispatcher hands nothing new to", "pepsi queue pause"},
	"resume": {"Resume", "Resumed", "Resume: the dispatchers hand out again the pending messages of", "pepsi queue resume"},
}

// actor returns the user of r if it may act, else answers 403 and returns false.
func (d *Dashboard) actor(w http.ResponseWriter, r *http.Request) (string, bool) {
	user, ok := d.opts.Auth.canAct(r)
	switch {
	case ok:
		return user, true
	case d.opts.Auth.WebConfigFile() == "":
		d.fail(w, r, http.StatusForbidden, "the dashboard is read-only: pepsi httpd runs without a web configuration (--web.config.file, WEB_CONFIG_FILE)")
	case user == "":
		d.fail(w, r, http.StatusForbidden, "the dashboard is read-only without basic-auth users in the web configuration")
	default:
		d.fail(w, r, http.StatusForbidden, fmt.Sprintf("user %q may not act (not in ACTION_USERS)", user))
	}
	return "", false
}

// confirmed reports whether r confirms its action, checking the user's
// password itself (see Auth); a confirmation that fails that check is
// answered with 403.
func (d *Dashboard) confirmed(w http.ResponseWriter, r *http.Request) (yes, ok bool) {
	if r.PostFormValue("confirm") != "yes" {
		return false, true
	}
	if !d.opts.Auth.verify(r) {
		d.fail(w, r, http.StatusForbidden, "the credentials do not check out against the web configuration")
		return false, false
	}
	return true, true
}

// action is one action on the messages it selected: count what it
// would change, or change it, filling in the page either way.
type action interface {
	count(ctx context.Context, db *admin.DB, page *actionPage) error
	do(ctx context.Context, db *admin.DB, page *actionPage) error
}

// serveAction answers the POSTs of one kind of action (name, done: "retry",
// "retried"): the user must be allowed to act; parse reads the selection;
// without confirm=yes the answer is the confirmation, with it the action
// is done (on past the request's end, up to actionTimeout) and logged.
func (d *Dashboard) serveAction(name, done string, parse func(*http.Request) (action, actionPage, error)) func(http.ResponseWriter, *http.Request, *admin.DB) {
	return func(w http.ResponseWriter, r *http.Request, db *admin.DB) {
		user, ok := d.actor(w, r)
		if !ok {
			return
		}
		if !d.paramsOK(w, r) {
			return
		}
		a, page, err := parse(r)
		if err != nil {
			d.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		page.Action, page.User, page.Verb = name, user, verbs[name]
		yes, ok := d.confirmed(w, r)
		if !ok {
			return
		}
		if !yes {
			if err := a.count(r.Context(), db, &page); err != nil {
				d.missing(w, r, page.id, err)
				return
			}
			d.render(w, r, http.StatusOK, "action", view{Title: page.Verb.Do + "?", Page: page})
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actionTimeout)
		defer cancel()
		if err := a.do(ctx, db, &page); err != nil {
			var acted *actedError
			switch {
			case errors.As(err, &acted) && acted.result != "":
				// A second post of one confirmation (a double click, a
				// reload): its result, not a second action.
				http.Redirect(w, r, acted.result, http.StatusSeeOther)
				return
			case errors.As(err, &acted), errors.Is(err, errConfirmation):
				d.fail(w, r, http.StatusConflict, err.Error())
				return
			}
			d.log.Warn("dashboard: "+name+" failed", "user", user, "what", page.What, "changed", page.Count, "err", err)
			d.missing(w, r, page.id, err)
			return
		}
		page.Done = true
		d.counts.invalidate()
		d.log.Info("dashboard: "+done, "user", user, "remote", r.RemoteAddr, "what", page.What,
			"changed", page.Count, "already_pending", page.Pending, "held", page.Held, "live_left_alone", page.Live,
			"left_alone", page.Skipped, "missing", page.Missing,
			"confirmed", page.Confirmed, "changed_since_confirmation", page.Changed)
		// Post, redirect, get: the result has a page of its own, so that
		// reloading it does not act again.
		page.ResultURL = "/actions/" + d.results.put(user, page)
		if b, ok := a.(*bulk); ok && b.token != "" {
			d.confirms.acted(b.token, page.ResultURL)
		}
		if wantsJSON(r) {
			d.writeJSON(w, r, http.StatusOK, page)
			return
		}
		http.Redirect(w, r, page.ResultURL, http.StatusSeeOther)
	}
}

// actionResult shows an action's result to the user who acted.
func (d *Dashboard) actionResult(w http.ResponseWriter, r *http.Request) {
	if !d.paramsOK(w, r) {
		return
	}
	user, _ := d.opts.Auth.canAct(r)
	page, ok := d.results.get(r.PathValue("token"), user)
	if !ok {
		d.fail(w, r, http.StatusNotFound, "no such result: results are kept for an hour, for the user who acted")
		return
	}
	d.render(w, r, http.StatusOK, "action", view{Title: page.Verb.Done, Page: page})
}

// Results are kept this long, and at most this many.
const (
	resultsKept = time.Hour
	maxResults  = 1000
)

// results are the actions' results, for their pages, by a random token.
type results struct {
	mu sync.Mutex
	m  map[string]result
}

type result struct {
	user string
	at   time.Time
	page actionPage
}

// put keeps page, the result of user's action, and returns its token;
// results older than resultsKept go, and the oldest beyond maxResults.
func (rs *results) put(user string, page actionPage) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]result{}
	}
	now := time.Now()
	for k, x := range rs.m {
		if now.Sub(x.at) > resultsKept {
			delete(rs.m, k)
		}
	}
	for len(rs.m) >= maxResults {
		oldest := ""
		for k, x := range rs.m {
			if oldest == "" || x.at.Before(rs.m[oldest].at) {
				oldest = k
			}
		}
		delete(rs.m, oldest)
	}
	page.ResultURL = "/actions/" + token
	rs.m[token] = result{user, now, page}
	return token
}

// get returns the result of token if user made it.
func (rs *results) get(token, user string) (actionPage, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	x, ok := rs.m[token]
	if !ok || x.user != user || time.Since(x.at) > resultsKept {
		return actionPage{}, false
	}
	return x.page, true
}

// held fills in the running messages a repair left (or would leave) alone.
func held(page *actionPage, res admin.Repair) {
	page.Held = res.Held
	if res.Held > 0 {
		page.HeldBy = "a running dispatcher"
		if res.Holder != nil && res.Holder.PID != 0 {
			page.HeldBy = "the running dispatcher (" + res.Holder.String() + ")"
		}
	}
}
