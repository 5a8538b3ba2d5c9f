package dispatch

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// eventKind says what an event reports.
type eventKind uint8

const (
	evAnswers  eventKind = iota // status lines, in order
	evProtocol                  // stdout broke the protocol; reading stopped
	evEOF                       // stdout closed
	evExit                      // the process has exited and its output is read
	evHello                     // its first line asked for pass tokens (protocol.Hello)
)

// evHelloTrace: its first line asked for trace contexts, and for tokens
// unless the event's err is set (protocol.Hello).
const evHelloTrace = evHello + 1

// event is what a worker's I/O goroutines report to the loop.
type event struct {
	kind    eventKind
	w       *worker
	answers []protocol.Status
	err     error
}

// worker is the loop's view of one stage program process. Only the loop
// goroutine reads or writes it.
type worker struct {
	seq      uint64 // start order, for packing
	pool     *pool
	proc     *process
	inflight fifo      // passes written and not yet answered, in order
	headAt   time.Time // when the current head reached the head
	idleAt   time.Time // when it last became idle
	handed   int       // ids handed over its life
	answered int       // status lines it sent
	draining bool      // MAX_MESSAGES reached: no more ids; stop once drained
	stopping bool      // told to exit; its process counts no more
	killAt   time.Time // when a stopping worker gets SIGKILL (zero: sent)
	gone     bool      // its stdout failed or closed: ignore what follows
	tokens   bool      // it asked for pass tokens (protocol.Hello): ids go out with theirs
	traces   bool      // it asked for trace contexts: while tracing, ids go out with their spans'
	tracer   *tracer   // the dispatcher's, while tracing; nil: off
	buf      []byte    // ids handed and not yet written (one write per hand-out)
}

// pass is a message handed out, its pass's token (queue.Claimed.Pass)
// and its parent (queue.Claimed.Parent: 0 for none).
type pass struct {
	id, token, parent int64
}

// passOf is the pass a claim handed out.
func passOf(c *queue.Claimed) pass { return pass{c.ID, c.Pass, c.Parent} }

// settle is the pass's verdict v at stage.
func (h pass) settle(stage string, v queue.Verdict) queue.Settle {
	return queue.Settle{ID: h.id, Pass: h.token, Stage: stage, Verdict: v, Parent: h.parent}
}

// free is how many more ids the worker may take now: up to QUEUE_LIMIT in
// flight and MAX_MESSAGES in its life.
func (w *worker) free(queueLimit, maxMessages int) int {
	if w.draining || w.stopping || w.gone {
		return 0
	}
	return min(queueLimit-w.inflight.len(), maxMessages-w.handed)
}

// hand queues h for the worker, its id alone or, once the worker asked
// for tokens, with its pass's; flush writes the ids of a hand-out at once.
func (w *worker) hand(h pass, now time.Time) {
	if w.inflight.len() == 0 {
		w.headAt = now
	}
	w.inflight.push(h)
	w.handed++
	if w.tracer != nil {
		w.buf = w.tracer.handed(w, h)
	} else if w.tokens {
		w.buf = protocol.AppendIDLine(w.buf, h.id, h.token)
	} else {
		w.buf = protocol.AppendIDLine(w.buf, h.id, 0)
	}
}

// flush sends the ids handed since the last flush to the writer in one buffer.
func (w *worker) flush() {
	if len(w.buf) == 0 {
		return
	}
	w.proc.feed <- w.buf
	w.buf = nil
}

// fifo is a queue of passes.
type fifo struct {
	ids  []pass
	head int
}

func (q *fifo) len() int { return len(q.ids) - q.head }

func (q *fifo) push(h pass) {
	if q.head > 0 && (q.head == len(q.ids) || len(q.ids) == cap(q.ids)) {
		// Reuse the space of what was popped, so that a queue that is
		// never empty does not grow without end.
		n := copy(q.ids, q.ids[q.head:])
		q.ids, q.head = q.ids[:n], 0
	}
	q.ids = append(q.ids, h)
}

func (q *fifo) pop() pass {
	h := q.ids[q.head]
	q.head++
	return h
}

// drain removes and returns every pass.
func (q *fifo) drain() []pass {
	ids := append([]pass(nil), q.ids[q.head:]...)
	q.ids, q.head = q.ids[:0], 0
	return ids
}
