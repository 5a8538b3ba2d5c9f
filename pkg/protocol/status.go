// Package protocol holds the worker protocol's wire format: the status line
// a stage program writes for each message id it was given.
//
//	CODE [STAGE=SECONDS ...] [next:STAGE | done | pause:SECONDS | join:STAGE] [# free text]
//
// The transition token is optional: a stage either moves the message itself
// in its own transaction and answers 0, or answers 0 with the transition and
// leaves it to the dispatcher to apply, batched with others.
package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLine is the longest status line accepted, newline excluded.
const MaxLine = 64 << 10

// NotRun is the code (as a status line's CODE or a stage program's exit
// status) that says the stage could not run the message because its
// database was unreachable: the dispatcher puts the message back without
// counting the pass against it (sysexits' EX_TEMPFAIL).
const NotRun = 75

// NotRunDelay is how long a message answered NotRun waits before it is
// claimed again, so that a stage whose database is down is not handed it
// at once, over and over.
const NotRunDelay = 1.0 // seconds

// Fused is a stage that ran inside another stage's pass, and for how long.
type Fused struct {
	Stage   string
	Seconds float64
}

// Move is a move: what becomes of a message after a pass. These are the
// only moves; the worker package, the queue's verdicts and the settle
// statement use them and their names.
type Move uint8

// The moves. A status line may carry all but Fail, which a stage makes
// itself (pepsi.fail) so that the dead letter keeps its reason.
const (
	Stay    Move = iota // none: the stage moved the message itself (or the pass failed)
	Advance             // on to another stage: pepsi.advance(), next:STAGE
	Finish              // done: pepsi.finish(), done
	Pause               // run the stage again later: pepsi.pause(), pause:SECONDS
	Fail                // dead-letter it, with a reason: pepsi.fail()
	Join                // wait at a join stage for its children: pepsi.join(), join:STAGE
)

// The moves' names, as the SQL API, the settle statement and the logs
// spell them.
const (
	AdvanceName = "advance"
	FinishName  = "finish"
	PauseName   = "pause"
	FailName    = "fail"
	JoinName    = "join"
)

// String returns the move's name; "" for Stay.
func (m Move) String() string {
	switch m {
	case Advance:
		return AdvanceName
	case Finish:
		return FinishName
	case Pause:
		return PauseName
	case Fail:
		return FailName
	case Join:
		return JoinName
	}
	return ""
}

// Status is one parsed status line.
type Status struct {
	Code  int     // 0 is success
	Fused []Fused // stages fused into this pass
	Move  Move    // a transition for the dispatcher to apply
	Next  string  // the stage to advance to (Move == Advance), or to wait at (Move == Join)
	Delay float64 // seconds to pause for (Move == Pause)
	Text  string  // free text after '#', valid UTF-8
}

// tokenKind is one kind of token that may follow the code. Adding a token
// to the protocol is adding a row to tokenKinds.
type tokenKind struct {
	name  string
	match func(tok []byte) bool
	apply func(st *Status, tok []byte) error
}

var tokenKinds = []tokenKind{
	{"STAGE=SECONDS", isFused, applyFused},
	{"next:STAGE", prefixed("next:"), applyNext},
	{"done", literal("done"), applyDone},
	{"pause:SECONDS", prefixed("pause:"), applyPause},
	{"join:STAGE", prefixed("join:"), applyJoin},
}

// Parse parses one status line (without its newline). The error says what
// is wrong in a form fit for a log line or dispatch_error.
func Parse(line []byte) (Status, error) {
	var st Status
	if len(line) > MaxLine {
		return st, fmt.Errorf("status line longer than %d bytes", MaxLine)
	}
	if bytes.IndexByte(line, 0) >= 0 {
		return st, fmt.Errorf("status line contains a NUL byte: %s", Quote(line))
	}
	head := line
	if i := commentStart(line); i >= 0 {
		head = line[:i]
		st.Text = strings.TrimSpace(strings.ToValidUTF8(string(line[i+1:]), "\uFFFD"))
	}
	fields := bytes.Fields(head)
	if len(fields) == 0 {
		return st, fmt.Errorf("status line has no code: %s", Quote(line))
	}
	code, ok := parseCode(fields[0])
	if !ok {
		return st, fmt.Errorf("status line does not start with a decimal code: %s", Quote(line))
	}
	st.Code = code
	for _, tok := range fields[1:] {
		if err := applyToken(&st, tok); err != nil {
			return st, fmt.Errorf("%w in status line %s", err, Quote(line))
		}
	}
	return st, nil
}

func applyToken(st *Status, tok []byte) error {
	for _, k := range tokenKinds {
		if k.match(tok) {
			return k.apply(st, tok)
		}
	}
	return fmt.Errorf("unknown token %s", Quote(tok))
}

// commentStart returns the index of the '#' that starts the free text: the
// first one at the start of the line or after a blank. A blank is what
// bytes.Fields splits tokens on, so that a '#' starts a token if and only if
// it starts the text.
func commentStart(line []byte) int {
	for i, c := range line {
		if c != '#' {
			continue
		}
		if i == 0 {
			return i
		}
		if r, _ := utf8.DecodeLastRune(line[:i]); unicode.IsSpace(r) {
			return i
		}
	}
	return -1
}

func parseCode(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func isFused(tok []byte) bool {
	i := bytes.IndexByte(tok, '=')
	return i > 0 && validStage(tok[:i])
}

var errSeconds = errors.New("bad seconds")

func prefixed(p string) func([]byte) bool {
	return func(tok []byte) bool { return bytes.HasPrefix(tok, []byte(p)) }
}

func literal(w string) func([]byte) bool {
	return func(tok []byte) bool { return string(tok) == w }
}

// setMove records a transition; a line carries at most one.
func setMove(st *Status, m Move, tok []byte) error {
	if st.Move != Stay {
		return fmt.Errorf("second transition %s", Quote(tok))
	}
	st.Move = m
	return nil
}

func applyNext(st *Status, tok []byte) error {
	stage := string(tok[len("next:"):])
	if err := CheckStage(stage); err != nil {
		return fmt.Errorf("bad stage name in %s (%v)", Quote(tok), err)
	}
	st.Next = stage
	return setMove(st, Advance, tok)
}

func applyDone(st *Status, tok []byte) error { return setMove(st, Finish, tok) }

func applyJoin(st *Status, tok []byte) error {
	stage := string(tok[len("join:"):])
	if err := CheckStage(stage); err != nil {
		return fmt.Errorf("bad stage name in %s (%v)", Quote(tok), err)
	}
	st.Next = stage
	return setMove(st, Join, tok)
}

func applyPause(st *Status, tok []byte) error {
	secs, ok := parseSeconds(tok[len("pause:"):])
	if !ok {
		return fmt.Errorf("%w in %s", errSeconds, Quote(tok))
	}
	st.Delay = secs
	return setMove(st, Pause, tok)
}

// parseSeconds parses a non-negative, finite number of seconds.
func parseSeconds(b []byte) (float64, bool) {
	secs, err := strconv.ParseFloat(string(b), 64)
	return secs, err == nil && secs >= 0 && secs <= 1e9
}

func applyFused(st *Status, tok []byte) error {
	i := bytes.IndexByte(tok, '=')
	secs, err := strconv.ParseFloat(string(tok[i+1:]), 64)
	if err != nil || secs < 0 || secs != secs || secs > 1e9 {
		return fmt.Errorf("%w in %s", errSeconds, Quote(tok))
	}
	st.Fused = append(st.Fused, Fused{Stage: string(tok[:i]), Seconds: secs})
	return nil
}

// Quote renders b as a quoted, printable, valid UTF-8 string for an error
// message: at most 120 bytes between the quotes, escapes included, followed
// by "…" if b was cut short.
func Quote(b []byte) string {
	const max = 120
	q := make([]byte, 1, max+8)
	q[0] = '"'
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b) // utf8.RuneError for a byte that is not UTF-8
		b = b[n:]
		i := len(q)
		q = strconv.AppendQuote(q, string(r))
		q = append(q[:i], q[i+1:len(q)-1]...) // the rune's escape, without quotes
		if len(q)-1 > max {
			return string(append(q[:i], '"')) + "…"
		}
	}
	return string(append(q, '"'))
}

// Append appends st as a status line, newline included, to dst. Newlines
// and NUL bytes in the text become blanks, and a text too long for MaxLine
// is cut short.
func Append(dst []byte, st Status) []byte {
	start := len(dst)
	dst = strconv.AppendInt(dst, int64(st.Code), 10)
	for _, f := range st.Fused {
		dst = append(dst, ' ')
		dst = append(dst, f.Stage...)
		dst = append(dst, '=')
		dst = strconv.AppendFloat(dst, f.Seconds, 'f', -1, 64)
	}
	switch st.Move {
	case Advance:
		dst = append(dst, " next:"...)
		dst = append(dst, st.Next...)
	case Finish:
		dst = append(dst, " done"...)
	case Pause:
		dst = append(dst, " pause:"...)
		dst = strconv.AppendFloat(dst, st.Delay, 'f', -1, 64)
	case Join:
		dst = append(dst, " join:"...)
		dst = append(dst, st.Next...)
	}
	if st.Text != "" {
		dst = append(dst, " # "...)
		text := textReplacer.Replace(st.Text)
		if room := MaxLine - (len(dst) - start); len(text) > room {
			for room > 0 && !utf8.RuneStart(text[room]) {
				room--
			}
			text = text[:max(room, 0)]
		}
		dst = append(dst, text...)
	}
	return append(dst, '\n')
}

// textReplacer keeps the free text on one line that Parse accepts.
var textReplacer = strings.NewReplacer("\n", " ", "\x00", " ")
