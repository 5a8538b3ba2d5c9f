package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// An action on several messages (ticked, or every one a filter matches)
// acts on exactly the messages its confirmation counted (issue 54). The
// confirmation reads their ids (admin.DB.BindSelection: the messages the
// action would change then) and keeps them in this process under a random
// token, which its form posts back; the action takes those ids alone, in
// batches, each only if it still matches the selection (admin's Within):
// a message enqueued meanwhile is not among them, and one that changed
// meanwhile (finished, moved on, taken by a dispatcher, purged) is left
// alone and counted, by what it is now. The ids are kept as varint
// deltas, about a byte or two a message for ids enqueued together (a
// confirmation of 100 000 messages: some 100 kB). A post that confirms
// without a token (a client that skipped the confirmation) acts on what
// the selection matches when it runs.

// maxBound bounds the messages one confirmation binds.
const maxBound = 1_000_000

// Confirmations are kept this long, at most maxConfirms of them and
// confirmBytes of ids in all (the oldest go first).
const (
	confirmKept  = time.Hour
	maxConfirms  = 1000
	confirmBytes = 64 << 20
)

// bulkStatuses are the statuses each action on several messages changes
// (cancel: running ones only where no dispatcher holds them, unless
// forced; retry: likewise).
var bulkStatuses = map[string][]queue.Status{
	"retry":   {queue.Failed, queue.Cancelled, queue.Paused, queue.Done, queue.Running},
	"purge":   {queue.Done, queue.Failed, queue.Cancelled},
	"hold":    {queue.Pending, queue.Paused},
	"release": {queue.Held},
	"cancel":  {queue.Pending, queue.Paused, queue.Held, queue.Waiting, queue.Running},
}

// bulk is an action on several messages, bound to its confirmation.
type bulk struct {
	action   // the action on the selection as it matches when it runs
	kind     string
	sel      admin.Selection
	change   change // a retry's
	force    bool   // a cancel's, of running messages too
	token    string // the confirmation posted
	confirms *confirmations
}

// bulk wraps a, an action on the messages of pick p, so that it acts on
// what its confirmation counted.
func (d *Dashboard) bulk(a action, kind string, p pick, c change, force bool, r *http.Request) *bulk {
	return &bulk{action: a, kind: kind, sel: p.selection(), change: c, force: force,
		token: r.PostFormValue("confirmation"), confirms: &d.confirms}
}

func (b *bulk) count(ctx context.Context, db *admin.DB, page *actionPage) error {
	if err := b.action.count(ctx, db, page); err != nil {
		return err
	}
	ids, more, err := db.BindSelection(ctx, b.sel, bulkStatuses[b.kind], b.force, maxBound)
	if err != nil {
		return err
	}
	if more {
		return fmt.Errorf("%w: more than %d messages would change; narrow the filter, or use %s", errTooMany, maxBound, verbs[b.kind].Command)
	}
	page.Count = int64(len(ids))
	if len(ids) > 0 {
		page.Confirmation = b.confirms.put(page.User, signature(page.Fields), ids)
		page.Fields = append(page.Fields, field{"confirmation", page.Confirmation})
	}
	return nil
}

func (b *bulk) do(ctx context.Context, db *admin.DB, page *actionPage) error {
	if b.token == "" {
		return b.action.do(ctx, db, page)
	}
	ids, err := b.confirms.take(b.token, page.User, signature(page.Fields))
	if err != nil {
		return err
	}
	page.Confirmed = int64(len(ids))
	now := map[queue.Status]int64{}
	var holder *queue.LockHolder
	for len(ids) > 0 {
		batch := ids[:min(len(ids), admin.DefaultBatch)]
		ids = ids[len(batch):]
		// The ids that still match; what the others are now, read for
		// those alone (few, as a rule).
		match, _, err := db.SelectionIDs(ctx, b.sel.Within(batch), len(batch))
		if err != nil {
			return b.partial(page, err)
		}
		if off := without(batch, match); len(off) > 0 {
			now1, gone, err := db.Unmatched(ctx, b.sel.Within(off))
			if err != nil {
				return b.partial(page, err)
			}
			for st, n := range now1 {
				now[st] += n
			}
			page.Missing += gone
		}
		if len(match) == 0 {
			continue
		}
		changed, held, h, err := b.apply(ctx, db, b.sel.Within(match), page.User)
		page.Count += changed
		page.Held += held
		if h != nil {
			holder = h
		}
		if err != nil {
			return b.partial(page, err)
		}
	}
	held(page, admin.Repair{Held: page.Held, Holder: holder})
	page.Changed = page.Confirmed - page.Count - page.Held - page.Missing
	page.ChangedNow = nowWords(now)
	return nil
}

// partial is err, saying what was changed before it.
func (b *bulk) partial(page *actionPage, err error) error {
	if page.Count > 0 {
		return fmt.Errorf("%w (after changing %d messages)", err, page.Count)
	}
	return err
}

// apply does the action on the messages of sel (bound ids, narrowed by
// Within), returning how many it changed and how many running ones it
// left to the dispatcher that holds them.
func (b *bulk) apply(ctx context.Context, db *admin.DB, sel admin.Selection, user string) (changed, held int64, holder *queue.LockHolder, err error) {
	switch b.kind {
	case "retry":
		res, err := db.RedriveSelection(ctx, sel, b.change.ToStage, b.change.Priority, false)
		return res.Changed, res.Held, res.Holder, err
	case "purge":
		res, err := db.PurgeSelection(ctx, sel, false)
		return res.Changed, 0, nil, err
	}
	// A message may go between reading the ids and changing them: once
	// more with the ids of then.
	ids := sel.IDs
	for try := 0; ; try++ {
		if try > 0 {
			var err error
			if ids, _, err = db.SelectionIDs(ctx, sel, len(sel.IDs)); err != nil || len(ids) == 0 {
				return 0, 0, nil, err
			}
		}
		p := admin.ControlParams{IDs: ids, By: user, Force: b.force}
		res, err := applyControl(ctx, db, b.kind, p)
		if errors.Is(err, admin.ErrNotFound) && try == 0 {
			continue
		}
		if b.kind != "cancel" {
			return res.Changed, 0, nil, err
		}
		return res.Changed, res.Running, res.Holder, err
	}
}

// without returns the ids of all (sorted) not in some (sorted).
func without(all, some []int64) []int64 {
	var out []int64
	for _, id := range all {
		if _, ok := slices.BinarySearch(some, id); !ok {
			out = append(out, id)
		}
	}
	return out
}

// nowWords says what the messages left alone are now: "3 done, 1 running".
func nowWords(now map[queue.Status]int64) string {
	var s []string
	for _, st := range queue.Statuses {
		if n := now[st]; n > 0 {
			s = append(s, strconv.FormatInt(n, 10)+" "+string(st))
		}
	}
	return strings.Join(s, ", ")
}

// signature is the selection a confirmation was for: its form's fields.
func signature(fields []field) string {
	var s []string
	for _, f := range fields {
		if f.Value != "" && f.Name != "confirmation" {
			s = append(s, f.Name+"="+f.Value)
		}
	}
	sort.Strings(s)
	return strings.Join(s, "&")
}

// errConfirmation is a confirmation that cannot be acted on.
var errConfirmation = errors.New("confirmation")

// actedError is a confirmation acted on already, and the page of its result.
type actedError struct{ result string }

func (e *actedError) Error() string { return "this confirmation was acted on already" }

// confirmations are the ids bound by the confirmations, by token.
type confirmations struct {
	mu    sync.Mutex
	m     map[string]*confirm
	bytes int
}

type confirm struct {
	user, sig string
	at        time.Time
	ids       []byte // varint deltas, in id order
	taken     bool
	result    string // the result's page, once acted on
}

// put keeps ids (sorted), the messages user's confirmation of the form
// sig counted, and returns its token.
func (cs *confirmations) put(user, sig string, ids []int64) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	enc := make([]byte, 0, len(ids)*2)
	var last int64
	for _, id := range ids {
		enc = binary.AppendUvarint(enc, uint64(id-last))
		last = id
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[string]*confirm{}
	}
	now := time.Now()
	for k, c := range cs.m {
		if now.Sub(c.at) > confirmKept {
			cs.drop(k)
		}
	}
	for len(cs.m) > 0 && (len(cs.m) >= maxConfirms || cs.bytes+len(enc) > confirmBytes) {
		oldest := ""
		for k, c := range cs.m {
			if oldest == "" || c.at.Before(cs.m[oldest].at) {
				oldest = k
			}
		}
		cs.drop(oldest)
	}
	cs.m[token] = &confirm{user: user, sig: sig, at: now, ids: enc}
	cs.bytes += len(enc)
	return token
}

func (cs *confirmations) drop(token string) {
	cs.bytes -= len(cs.m[token].ids)
	delete(cs.m, token)
}

// take returns the ids of user's confirmation token of the form sig, once:
// a confirmation acted on already is an *actedError (with its result, once
// there is one).
func (cs *confirmations) take(token, user, sig string) ([]int64, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.m[token]
	switch {
	case !ok || c.user != user || time.Since(c.at) > confirmKept:
		return nil, fmt.Errorf("%w: no such confirmation: confirmations are kept for an hour, by the httpd that showed them, for the user who saw them; confirm again", errConfirmation)
	case c.sig != sig:
		return nil, fmt.Errorf("%w: the confirmation was for other messages than those posted; confirm again", errConfirmation)
	case c.taken:
		return nil, &actedError{c.result}
	}
	c.taken = true
	var ids []int64
	var last int64
	for b := c.ids; len(b) > 0; {
		d, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: a confirmation's ids do not decode", errConfirmation)
		}
		last += int64(d)
		ids = append(ids, last)
		b = b[n:]
	}
	cs.bytes -= len(c.ids)
	c.ids = nil // kept for its result, the ids no longer
	return slices.Clip(ids), nil
}

// acted notes the result of the confirmation token.
func (cs *confirmations) acted(token, result string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c, ok := cs.m[token]; ok {
		c.result = result
	}
}
