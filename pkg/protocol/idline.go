package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// EnvProtocol is the environment variable in which the dispatcher tells
// its workers the protocol version it speaks; Version is this one's. A
// worker may say Hello only to a dispatcher of version 2 or later.
const (
	EnvProtocol = "PEPSI_PROTOCOL"
	Version     = 2
)

// HelloToken is the hello line by which a worker asks for pass tokens:
// from then on each id comes with its pass's token ("ID TOKEN").
const HelloToken = "hello token"

// Hello is what a worker's hello line asks for.
type Hello struct {
	Token bool // each id with its pass's token
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
		if string(f) != "token" {
			return Hello{}, false
		}
		h.Token = true
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
// its pass's token, 0 when the line has none.
func ParseIDLine(line []byte) (id, token int64, err error) {
	f := bytes.Fields(line)
	if len(f) == 0 || len(f) > 2 {
		return 0, 0, fmt.Errorf("id line %s: want ID or ID TOKEN", Quote(line))
	}
	id, err = strconv.ParseInt(string(f[0]), 10, 64)
	if err == nil && id <= 0 {
		err = errors.New("not positive")
	}
	if err != nil {
		return 0, 0, fmt.Errorf("id line %s: bad message id", Quote(line))
	}
	if len(f) == 2 {
		token, err = strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil || token <= 0 {
			return 0, 0, fmt.Errorf("id line %s: bad pass token", Quote(line))
		}
	}
	return id, token, nil
}
