package dashboard

import (
	"strings"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The message page's history (issue 54). pepsi.history keeps a message's
// failed passes only: a pass that succeeded writes nothing there (a write
// per pass would cost every settle), and the message row keeps its stage,
// attempts there and the time of its last change alone. So the passes
// that succeeded are shown as far as what is stored implies them: a stage
// the message failed a pass at, and left (its next failed pass, or where
// it is now, is another stage), was passed after that failed pass and by
// the next thing known; a done message passed its stage, finishing, when
// it was last updated. A stage it passed at the first try leaves no trace,
// and the page says so.
//
// Its errors: a message row keeps the reason of its stage's pepsi.fail()
// (error; "cancelled by USER" for a cancel) and that of its last failed
// pass (dispatch_error), until a retry clears them. A done message has
// neither as its error: they are of passes that later succeeded. A failed
// message's error is the fail move's reason when it has one (the move
// ended it; a dispatch_error beside it is from an earlier failed pass,
// perhaps at another stage), else its last failed pass's. Those that are
// not the current error go to the history, once: a dispatch_error that is
// the reason of the last failed pass kept is shown there already.

// passed is a pass that succeeded, as the history implies it.
type passed struct {
	Stage string `json:"stage"`
	// After and By bound when: after the failed pass before it, by the
	// next thing known (At, when exact: a done message's finish).
	After    *time.Time `json:"after,omitempty"`
	By       *time.Time `json:"by,omitempty"`
	At       *time.Time `json:"at,omitempty"`
	Finished bool       `json:"finished,omitempty"` // the pass that made it done
}

// event is one entry of the timeline, between enqueued and now.
type event struct {
	Failed *admin.Pass // a failed pass, else
	Passed *passed     // a pass that succeeded, else
	Old    *oldError   // an error of the row that is not the current one
}

// oldError is an error of the message row that belongs to its history.
type oldError struct {
	Column string `json:"column"` // error or dispatch_error
	Text   string `json:"text"`
	Why    string `json:"why"`
}

// errorsOf says which of m's errors is the current one ("error",
// "dispatch_error", both as "" for a live message, whose dispatch_error
// says why it waits) and which belong to its history.
func errorsOf(m *admin.Message) (current string, old []oldError) {
	var last *admin.Pass
	if n := len(m.History); n > 0 {
		last = &m.History[n-1]
	}
	inHistory := func(s string) bool {
		return last != nil && (last.Reason == s || strings.HasPrefix(s, last.Reason) || strings.HasPrefix(last.Reason, s))
	}
	stale := func(why string) {
		if m.DispatchError != nil && !inHistory(*m.DispatchError) {
			old = append(old, oldError{"dispatch_error", *m.DispatchError, why})
		}
	}
	switch m.Status {
	case queue.Done:
		stale("the answer of an earlier failed pass; a later pass succeeded")
		if m.Error != nil {
			old = append(old, oldError{"error", *m.Error, "an earlier reason; a later pass succeeded"})
		}
		return "", old
	case queue.Failed, queue.Cancelled:
		if m.Error != nil {
			stale("the answer of an earlier failed pass, not of the " + map[bool]string{true: "cancel", false: "fail move"}[m.Status == queue.Cancelled] + " that ended it")
			return "error", old
		}
		if m.DispatchError != nil {
			return "dispatch_error", nil
		}
		return "", nil
	}
	return "", nil
}

// timeline is m's history: its failed passes with the passes that
// succeeded they imply, and the errors of its row that are not current.
func timeline(m *admin.Message, old []oldError) (events []event, shown []passed) {
	pass := func(p passed) {
		shown = append(shown, p)
		events = append(events, event{Passed: &shown[len(shown)-1]})
	}
	shown = make([]passed, 0, len(m.History)+1)
	for i := range m.History {
		h := &m.History[i]
		events = append(events, event{Failed: h})
		next, by := m.Stage, m.UpdatedAt
		if i+1 < len(m.History) {
			next, by = m.History[i+1].Stage, m.History[i+1].At
		}
		if next != h.Stage {
			after := h.At
			pass(passed{Stage: h.Stage, After: &after, By: &by})
		}
	}
	for i := range old {
		events = append(events, event{Old: &old[i]})
	}
	if m.Status == queue.Done {
		at := m.UpdatedAt
		pass(passed{Stage: m.Stage, At: &at, Finished: true})
	}
	return events, shown
}
