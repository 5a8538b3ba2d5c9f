package app

import (
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// resultShown is how many bytes of a result show prints.
const resultShown = 60

// writeFamily writes a message's place in a graph: its parent, its
// children by status with a few ids, and its result's size and start.
func writeFamily(kv func(k, v string), m *admin.Message) {
	if p := m.Parent; p != nil {
		v := strconv.FormatInt(p.ID, 10)
		if p.Gone {
			v += " (gone: purged or deleted)"
		} else {
			v += " at " + quoteIfNeeded(p.Stage) + ", " + string(p.Status)
		}
		kv("parent", v)
	}
	if c := m.Children; c != nil {
		var parts []string
		for _, st := range queue.Statuses {
			if n := c.ByStatus[st]; n > 0 {
				parts = append(parts, strconv.FormatInt(n, 10)+" "+string(st))
			}
		}
		kv("children", strconv.FormatInt(c.Total, 10)+": "+strings.Join(parts, ", "))
		if len(c.Open) > 0 {
			kv("open children", fewIDs(c.Open, c.Total-c.ByStatus[queue.Done]-c.ByStatus[queue.Failed]-c.ByStatus[queue.Cancelled]))
		}
		if len(c.Failed) > 0 {
			kv("failed children", fewIDs(c.Failed, c.ByStatus[queue.Failed]))
		}
	}
	if r := m.Result; r != nil {
		v := plural(r.Size, "byte")
		if r.Size > 0 {
			v += ": " + preview(r.Head, r.Size)
		}
		kv("result", v)
	}
}

// fewIDs lists ids, "..." when they are fewer than n.
func fewIDs(ids []int64, n int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	out := strings.Join(s, " ")
	if int64(len(ids)) < n {
		out += " ..."
	}
	return out
}

// preview is the start of a result of size bytes whose first bytes are
// head: quoted text when it is UTF-8, else hex.
func preview(head []byte, size int64) string {
	cut := head[:min(len(head), resultShown)]
	for i := 0; i < 3 && len(cut) > 0 && !utf8.Valid(cut) && len(cut) < len(head); i++ {
		cut = cut[:len(cut)-1] // a character the cut split
	}
	more := ""
	if int64(len(cut)) < size {
		more = "..."
	}
	if utf8.Valid(cut) {
		return strconv.Quote(string(cut)) + more
	}
	b := head[:min(len(head), resultShown/2)]
	if int64(len(b)) < size {
		more = "..."
	}
	return "0x" + hex.EncodeToString(b) + more
}
