package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// EnvProtocol is the environment variable in which the dispatcher tells
// its workers the protocol version it speaks; Version is this one's. A
// worker may say Hello only to a dispatcher of version 2 or later, and
// ask for traces (the word trace) only of version 3 or later.
const (
	EnvProtocol = "PEPSI_PROTOCOL"
	Version     = 3
)

// HelloToken is the hello line by which a worker asks for pass tokens:
// from then on each id comes with its pass's token ("ID TOKEN").
const HelloToken = "hello token"

// HelloTrace is the hello line by which a worker asks for pass tokens and
// trace contexts (version 3): each id comes with its pass's token and,
// when the dispatcher traces the pass, the pass span's W3C traceparent
// ("ID TOKEN TRACEPARENT").
const HelloTrace = "hello token trace"

// Hello is what a worker's hello line asks for.
type Hello struct {
	Token bool // each id with its pass's token
	Trace bool // each id with its pass span's traceparent, when traced
}

// ParseHello reports whether line is a hello line ("hello" and the
// features asked for, blank-separated), and what it asks for. A line with
// a word this dispatcher does not know is not one (it is then a status
// line, and a protocol error): a worker asks only for what the version in
// EnvProtocol offers. A status line begins with its code, a digit: it is
// never a hello line.
func ParseHello(line []byte) (Hello, bool) {
	fields := bytes.Fields(line)
	if len(fields) == 0 || string(fields[0]) != "hello" {
		return Hello{}, false
	}
	var h Hello
	for _, f := range fields[1:] {
		switch string(f) {
		case "token":
			h.Token = true
		case "trace":
			h.Trace = true
		default:
			return Hello{}, false
		}
	}
	return h, true
}

// AppendIDLine appends the id line of message id to b: "ID\n", or with a
// pass token other than 0, "ID TOKEN\n".
func AppendIDLine(b []byte, id, token int64) []byte {
	b = strconv.AppendInt(b, id, 10)
	if token != 0 {
		b = append(b, ' ')
		b = strconv.AppendInt(b, token, 10)
	}
	return append(b, '\n')
}

// ParseIDLine parses an id line without its newline: the message id and
// its pass's token, 0 when the line has none (a traceparent is ignored:
// ParseID).
func ParseIDLine(line []byte) (id, token int64, err error) {
	l, err := ParseID(line)
	return l.ID, l.Token, err
}

// IDLine is a parsed id line.
type IDLine struct {
	ID    int64
	Token int64  // the pass's token; 0: none
	Trace string // the pass span's W3C traceparent; "": none
}

// ParseID parses an id line without its newline: "ID [TOKEN]
// [TRACEPARENT]". A traceparent is told from a token by its '-'.
func ParseID(line []byte) (IDLine, error) {
	var l IDLine
	f := bytes.Fields(line)
	if n := len(f); n > 1 && bytes.IndexByte(f[n-1], '-') > 0 {
		l.Trace = string(f[n-1])
		f = f[:n-1]
	}
	if len(f) == 0 || len(f) > 2 {
		return IDLine{}, fmt.Errorf("id line %s: want ID, ID TOKEN or ID TOKEN TRACEPARENT", Quote(line))
	}
	id, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err == nil && id <= 0 {
		err = errors.New("not positive")
	}
	if err != nil {
		return IDLine{}, fmt.Errorf("id line %s: bad message id", Quote(line))
	}
	l.ID = id
	if len(f) == 2 {
		l.Token, err = strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil || l.Token <= 0 {
			return IDLine{}, fmt.Errorf("id line %s: bad pass token", Quote(line))
		}
	}
	return l, nil
}
