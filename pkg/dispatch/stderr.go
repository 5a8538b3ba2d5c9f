package dispatch

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"
)

// What a worker's stderr may put in the dispatcher's log. A stage that
// loops on a log call, or dumps a megabyte on one line, must not fill the
// journal: a relayed line keeps its first stderrLineMax bytes, and each
// worker relays at most stderrRate lines a second after a burst of
// stderrBurst. The burst lets a start-up banner or a crashing program's
// stack trace through whole; 50 lines a second is more than anyone reads
// in a journal, and still bounds a worker to about 200 KiB a second of
// log at the worst (every line cut). Lines over the rate are dropped and
// counted, never queued: the relay only reads and logs, so a slow log
// never holds the worker's stderr, and nothing here touches the loop.
const (
	stderrLineMax = 4 << 10          // bytes of a line relayed; the rest is cut
	stderrRate    = 50               // lines a second a worker relays, sustained
	stderrBurst   = 200              // lines a worker relays at once after a quiet spell
	stderrReport  = 10 * time.Second // the least time between two reports of dropped lines
)

// stderrRelay logs what one worker writes to stderr, within the limits
// above. Only the worker's stderr goroutine uses it.
type stderrRelay struct {
	log   *slog.Logger // with the worker's stage and pid
	stage string
	obs   Observer // StderrDropped, from this goroutine
	now   func() time.Time

	tokens float64   // lines that may be relayed now
	last   time.Time // when tokens was last refilled

	dropping   bool      // lines are being dropped (an episode, logged when it starts and ends)
	dropped    int64     // lines dropped since the last report
	total      int64     // lines dropped since the worker started
	reportedAt time.Time // the last report of dropped lines
}

// newStderrRelay returns a relay with a full burst.
func newStderrRelay(log *slog.Logger, stage string, obs Observer, now func() time.Time) *stderrRelay {
	return &stderrRelay{log: log, stage: stage, obs: obs, now: now, tokens: stderrBurst, last: now()}
}

// run relays r's lines until it ends, then reports what was dropped and
// not yet reported.
func (s *stderrRelay) run(r io.ReadCloser) {
	defer r.Close()
	br := bufio.NewReaderSize(r, stderrLineMax)
	for {
		line, cut, err := readCapped(br, stderrLineMax)
		if len(line) > 0 || cut > 0 {
			s.relay(line, cut)
		}
		if err != nil {
			break
		}
	}
	if s.dropped > 0 {
		s.log.Warn("worker stderr: closed; lines dropped",
			"dropped", s.dropped, "dropped_total", s.total)
	}
}

// relay logs one line, or drops it when the worker is over its rate.
// cut is how many bytes of it readCapped left out.
func (s *stderrRelay) relay(line []byte, cut int) {
	now := s.now()
	s.tokens = min(stderrBurst, s.tokens+now.Sub(s.last).Seconds()*stderrRate)
	s.last = now
	if s.dropping && s.tokens >= stderrBurst {
		// Back under the rate long enough to refill the burst.
		s.dropping = false
		s.log.Warn("worker stderr: under the rate limit again",
			"dropped", s.dropped, "dropped_total", s.total)
		s.dropped, s.reportedAt = 0, now
	}
	if s.tokens < 1 {
		s.drop(now)
		return
	}
	s.tokens--
	text := "worker: " + string(line)
	if cut > 0 {
		text += "… [cut " + strconv.Itoa(cut) + " bytes]"
		s.obs.StderrDropped(s.stage, 0, int64(cut))
	}
	s.log.Info(text)
}

// drop counts a line dropped over the rate and reports it when dropping
// starts, then at most every stderrReport.
func (s *stderrRelay) drop(now time.Time) {
	s.dropped++
	s.total++
	s.obs.StderrDropped(s.stage, 1, 0)
	switch {
	case !s.dropping:
		s.dropping = true
		s.reportedAt = now
		s.log.Warn("worker stderr: over the rate limit; dropping lines",
			"limit", strconv.Itoa(stderrRate)+" lines/s", "burst", stderrBurst)
	case now.Sub(s.reportedAt) >= stderrReport:
		s.log.Warn("worker stderr: lines dropped",
			"dropped", s.dropped, "dropped_total", s.total, "since", now.Sub(s.reportedAt).Round(time.Second))
		s.dropped, s.reportedAt = 0, now
	}
}

// readCapped reads the next line of br (whose buffer holds limit bytes)
// without its line end and returns at most limit bytes of it as valid
// UTF-8, cut at a character boundary; cut is how many of the line's bytes
// were left out. The rest of a long line is read and discarded a buffer at
// a time, never held. A last line without a newline is a line; the error
// comes with the next read. line is valid until the next read of br.
func readCapped(br *bufio.Reader, limit int) (line []byte, cut int, err error) {
	line, err = br.ReadSlice('\n')
	long := errors.Is(err, bufio.ErrBufferFull)
	if long {
		line = bytes.Clone(line)
		for errors.Is(err, bufio.ErrBufferFull) {
			var more []byte
			more, err = br.ReadSlice('\n')
			if err == nil {
				more = bytes.TrimRight(more, "\r\n")
			}
			cut += len(more)
		}
	} else {
		line = bytes.TrimRight(line, "\r\n")
	}
	if err != nil {
		if len(line) == 0 && cut == 0 {
			return nil, 0, err
		}
		err = nil
	}
	if len(line) <= limit && utf8.Valid(line) {
		return line, cut, nil
	}
	// Invalid bytes become U+FFFD (three bytes each); keep what fits.
	out := make([]byte, 0, limit)
	i := 0
	for i < len(line) {
		r, n := utf8.DecodeRune(line[i:])
		if r == utf8.RuneError && n == 1 && long && !utf8.FullRune(line[i:]) {
			break // a character the cut split goes with the rest
		}
		if len(out)+utf8.RuneLen(r) > limit {
			break
		}
		out = utf8.AppendRune(out, r)
		i += n
	}
	return out, cut + len(line) - i, nil
}
