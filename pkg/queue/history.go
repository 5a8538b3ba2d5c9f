package queue

import (
	"os"
	"sync"
)

// FailKind is how a failed pass failed, as a message's history records it
// (pepsi.history.kind).
type FailKind uint8

// The kinds of failed pass; FailNone is a Settle of another verdict.
const (
	FailNone     FailKind = iota
	FailAnswer            // the stage answered non-zero
	FailCrash             // its worker died with the message outstanding
	FailTimeout           // unanswered within MAX_RUNTIME: the worker was killed
	FailProtocol          // its worker broke the protocol
)

// String is the kind's word in pepsi.history.
func (k FailKind) String() string {
	switch k {
	case FailAnswer:
		return "answer"
	case FailCrash:
		return "crash"
	case FailTimeout:
		return "timeout"
	case FailProtocol:
		return "protocol"
	}
	return ""
}

// HistoryKeep is how many failed passes pepsi.history keeps of a message:
// its last ones.
const HistoryKeep = 20

// HistoryReasonMax is the most characters of a reason pepsi.history keeps
// (dispatch_error has the whole of the last one).
const HistoryReasonMax = 4096

// historySQL records the failed passes of a settle, run after it in its
// transaction: one row each for the verdicts ($1 to $5) that the settle
// applied, which are the rows it wrote now (updated_at is the
// transaction's start, which no stage's transaction shares) and left
// failed or paused for a retry at the stage they were handed at. A row
// the stage moved on itself before its worker died, an advanced one (made
// pending) and a stale verdict (left alone) get none. Each row is numbered
// after the message's last, and the rows HistoryKeep or more before it
// are deleted. The status names the two partitions the row can be in, so
// that the done ranges are never probed.
const historySQL = `
WITH v AS (
    SELECT v.id, v.stage, v.kind, left(v.reason, ` + historyReasonMax + `) AS reason, v.pid, s.attempts,
           coalesce((SELECT max(h.n) FROM pepsi.history h WHERE h.id = v.id), 0) + 1 AS n
      FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::int[]) AS v(id, stage, kind, reason, pid)
      JOIN pepsi.state s ON s.id = v.id AND s.status IN ('failed', 'paused')
     WHERE s.updated_at = now() AND s.stage = v.stage
), ins AS (
    INSERT INTO pepsi.history (id, n, at, stage, attempt, kind, reason, pid, host)
    SELECT id, n, now(), stage, attempts, kind, reason, pid, $6 FROM v
    ON CONFLICT (id, n) DO NOTHING -- a message settled twice in one batch: its first pass
)
DELETE FROM pepsi.history h USING v WHERE h.id = v.id AND h.n <= v.n - ` + historyKeep

const (
	historyKeep      = "20"   // HistoryKeep
	historyReasonMax = "4096" // HistoryReasonMax
)

// hostname is this process's host name, which the history records with
// the worker's pid: the dispatcher that settles a pass is the one that
// ran it.
var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// historyArgs returns historySQL's arguments for the failed passes of vs,
// or nil when there are none: a turn without failures queues no
// statement and allocates nothing for the history.
func historyArgs(vs []Settle) []any {
	n := 0
	for i := range vs {
		if vs[i].Verdict == PassFailed {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	ids, stages, kinds, reasons, pids := make([]int64, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]int32, 0, n)
	for i := range vs {
		v := &vs[i]
		if v.Verdict != PassFailed {
			continue
		}
		kind := v.Kind
		if kind == FailNone {
			kind = FailAnswer
		}
		ids, stages, kinds = append(ids, v.ID), append(stages, v.Stage), append(kinds, kind.String())
		reasons, pids = append(reasons, v.Reason), append(pids, v.PID)
	}
	return []any{ids, stages, kinds, reasons, pids, hostname()}
}
