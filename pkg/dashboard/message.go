package dashboard

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// payloadShown is how much of a payload the message page shows.
const payloadShown = 64 << 10

// header is one message header as the page lists it.
type header struct {
	Key   string `json:"key"`
	Value string `json:"value"` // a string header's text, else its JSON
}

// payloadView is the part of a payload the page shows.
type payloadView struct {
	Size      int64  `json:"size"`           // bytes in all
	Shown     int64  `json:"shown"`          // bytes shown (at most 64 KiB)
	Text      string `json:"text,omitempty"` // the bytes shown, when they are UTF-8
	IsText    bool   `json:"is_text"`
	Hex       string `json:"-"`                // a hex dump of them otherwise
	Base64    []byte `json:"base64,omitempty"` // the bytes shown, when they are not text
	Truncated bool   `json:"truncated"`
	Download  string `json:"download_url"` // the whole payload
}

// messagePage is the message page's data.
type messagePage struct {
	Message *admin.Message `json:"message"`
	Headers []header       `json:"-"`
	Payload payloadView    `json:"payload"`
	// Group is the failure group of a failed message, with its list.
	Group    string   `json:"reason,omitempty"`
	GroupURL string   `json:"group_url,omitempty"`
	CanRetry bool     `json:"-"` // the message is not pending: retry would move it
	Stages   []string `json:"-"` // the configured stages, where a retry may put it
	// Controls are the controls its status takes (hold, release, cancel).
	Controls []button `json:"-"`
	// CurrentError names the column (error or dispatch_error) that says
	// why a failed or cancelled message ended so; "" for the others.
	CurrentError string `json:"current_error"`
	// OldErrors are errors of its row that belong to its history: of an
	// earlier failed pass, for a done message or beside a fail move's
	// reason (see timeline.go).
	OldErrors []oldError `json:"old_errors"`
	// Passed are the passes that succeeded, as far as the history implies
	// them (see timeline.go).
	Passed []passed `json:"passed"`
	// ErrorNow and DispatchNow: the column is shown as the message's error.
	ErrorNow, DispatchNow bool    `json:"-"`
	Events                []event `json:"-"` // the timeline between enqueued and now
	// Unrecorded: passes it made may have left no trace (done, or passed
	// at stages it never failed at); the timeline says so.
	Unrecorded bool `json:"-"`
	// Its graph: its children by status (with their lists), the newest
	// childrenShown of them, and the start of its result as text.
	Kids       []cell    `json:"-"`
	KidRows    []listRow `json:"-"`
	KidsMore   bool      `json:"-"` // more children than KidRows
	KidsURL    string    `json:"-"` // the list of them all
	ResultText string    `json:"-"`
	ResultHex  string    `json:"-"`
	// Its trace: the trace id of its traceparent header, and the trace
	// UI's page of it (Options.TraceURL); "" for none.
	TraceID  string `json:"trace_id,omitempty"`
	TraceURL string `json:"trace_url,omitempty"`
}

// childrenShown is how many children the message page lists.
const childrenShown = 100

// messageID reads the {id} of the path, or answers 400 and returns false;
// so it does when the parameters are wrong (checkParams).
func (d *Dashboard) messageID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	if !d.paramsOK(w, r) {
		return 0, false
	}
	id, err := parseID("message id", r.PathValue("id"))
	if err != nil {
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return 0, false
	}
	return id, true
}

// missing answers a request for a message that does not exist, or one
// whose database work failed.
func (d *Dashboard) missing(w http.ResponseWriter, r *http.Request, id int64, err error) {
	switch {
	case errors.Is(err, admin.ErrNotFound):
		d.fail(w, r, http.StatusNotFound, "no such message: "+strconv.FormatInt(id, 10))
		return
	case errors.Is(err, errTooMany), errors.Is(err, errUnknownStage), errors.Is(err, admin.ErrSearchTimeout):
		d.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	d.dbFailed(w, r, err)
}

func (d *Dashboard) message(w http.ResponseWriter, r *http.Request, db *admin.DB) {
	id, ok := d.messageID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	m, err := db.Show(ctx, id)
	if err != nil {
		d.missing(w, r, id, err)
		return
	}
	head, size, err := db.PayloadHead(ctx, id, payloadShown)
	if err != nil {
		d.missing(w, r, id, err)
		return
	}
	page := messagePage{
		Message:  m,
		Headers:  headers(m.Headers),
		Payload:  showPayload(head, size, id),
		CanRetry: m.Status != queue.Pending && m.Status != queue.Held && m.Status != queue.Waiting,
		Stages:   d.opts.Stages,
	}
	page.TraceID, page.TraceURL = d.traceOf(m.Headers)
	for _, c := range []button{{"hold", "Hold"}, {"release", "Release"}, {"cancel", "Cancel"}} {
		if slices.Contains(controlStatuses[c.Action], m.Status) || (c.Action == "cancel" && m.Status == queue.Running) {
			page.Controls = append(page.Controls, c)
		}
	}
	var old []oldError
	page.CurrentError, old = errorsOf(m)
	live := !m.Status.Finished()
	page.ErrorNow = m.Error != nil && (live || page.CurrentError == "error")
	page.DispatchNow = m.DispatchError != nil && (live || page.CurrentError == "dispatch_error")
	page.OldErrors = append([]oldError{}, old...)
	page.Events, page.Passed = timeline(m, old)
	page.Unrecorded = m.Status == queue.Done || len(page.Passed) > 0
	if m.Status == queue.Failed {
		page.Group = admin.FoldReason(m.Error, m.DispatchError)
		page.GroupURL = groupURL(m.Stage, page.Group)
	}
	if err := family(ctx, db, &page); err != nil {
		d.dbFailed(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "message", view{Title: "Message " + strconv.FormatInt(id, 10), Nav: "messages", Page: page})
}

// headers lists a message's headers by key; headers that are not a JSON
// object are one entry without a key.
func headers(raw json.RawMessage) []header {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return []header{{Value: string(raw)}}
	}
	out := make([]header, 0, len(obj))
	for k, v := range obj {
		h := header{Key: k, Value: string(v)}
		var s string
		if json.Unmarshal(v, &s) == nil {
			h.Value = s
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b header) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	return out
}

// showPayload is what the page shows of a payload whose first bytes are
// head: text when they are valid UTF-8 (a character cut at the 64 KiB
// boundary does not count against it), a hex dump otherwise.
func showPayload(head []byte, size, id int64) payloadView {
	p := payloadView{
		Size:      size,
		Shown:     int64(len(head)),
		Truncated: int64(len(head)) < size,
		Download:  "/messages/" + strconv.FormatInt(id, 10) + "/payload",
	}
	check := head
	if p.Truncated {
		// Up to 3 bytes of a character the cut split.
		for i := 0; i < 3 && len(check) > 0 && !utf8.Valid(check); i++ {
			check = check[:len(check)-1]
		}
	}
	if utf8.Valid(check) {
		p.IsText, p.Text, p.Shown = true, string(check), int64(len(check))
		return p
	}
	p.Hex, p.Base64 = hex.Dump(head), head
	return p
}

// payload serves a message's whole payload as a download.
func (d *Dashboard) payload(w http.ResponseWriter, r *http.Request, db *admin.DB) {
	id, ok := d.messageID(w, r)
	if !ok {
		return
	}
	body, err := db.Payload(r.Context(), id)
	if err != nil {
		d.missing(w, r, id, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="message-`+strconv.FormatInt(id, 10)+`.bin"`)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}
