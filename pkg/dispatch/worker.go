package dispatch

import (
	"strconv"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// eventKind says what an event reports.
type eventKind uint8

const (
	evAnswers  eventKind = iota // status lines, in order
	evProtocol                  // stdout broke the protocol; reading stopped
	evEOF                       // stdout closed
	evExit                      // the process has exited and its output is read
)

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
	inflight fifo      // ids written and not yet answered, in order
	headAt   time.Time // when the current head reached the head
	idleAt   time.Time // when it last became idle
	handed   int       // ids handed over its life
	answered int       // status lines it sent
	draining bool      // MAX_MESSAGES reached: no more ids; stop once drained
	stopping bool      // told to exit; its process counts no more
	killAt   time.Time // when a stopping worker gets SIGKILL (zero: sent)
	gone     bool      // its stdout failed or closed: ignore what follows
	buf      []byte    // ids handed and not yet written (one write per hand-out)
}

// free is how many more ids the worker may take now: up to QUEUE_LIMIT in
// flight and MAX_MESSAGES in its life.
func (w *worker) free(queueLimit, maxMessages int) int {
	if w.draining || w.stopping || w.gone {
		return 0
	}
	return min(queueLimit-w.inflight.len(), maxMessages-w.handed)
}

// hand queues id for the worker; flush writes the ids of a hand-out at once.
func (w *worker) hand(id int64, now time.Time) {
	if w.inflight.len() == 0 {
		w.headAt = now
	}
	w.inflight.push(id)
	w.handed++
	w.buf = strconv.AppendInt(w.buf, id, 10)
	w.buf = append(w.buf, '\n')
}

// flush sends the ids handed since the last flush to the writer in one buffer.
func (w *worker) flush() {
	if len(w.buf) == 0 {
		return
	}
	w.proc.feed <- w.buf
	w.buf = nil
}

// fifo is a queue of message ids.
type fifo struct {
	ids  []int64
	head int
}

func (q *fifo) len() int { return len(q.ids) - q.head }

func (q *fifo) push(id int64) {
	if q.head > 0 && (q.head == len(q.ids) || len(q.ids) == cap(q.ids)) {
		// Reuse the space of what was popped, so that a queue that is
		// never empty does not grow without end.
		n := copy(q.ids, q.ids[q.head:])
		q.ids, q.head = q.ids[:n], 0
	}
	q.ids = append(q.ids, id)
}

func (q *fifo) pop() int64 {
	id := q.ids[q.head]
	q.head++
	return id
}

// drain removes and returns every id.
func (q *fifo) drain() []int64 {
	ids := append([]int64(nil), q.ids[q.head:]...)
	q.ids, q.head = q.ids[:0], 0
	return ids
}
