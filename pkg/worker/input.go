package worker

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// maxIDLine bounds an input line; an id line has at most 40 characters.
const maxIDLine = 4096

// input is one line of ids, and whether a whole next line is already
// buffered (so that the answer need not be flushed yet).
type input struct {
	line []byte
	more bool
	err  error // io.EOF at the end
}

// readIDs sends in's lines on lines until it ends or stop is closed.
func readIDs(in io.Reader, lines chan<- input, stop <-chan struct{}) {
	br := bufio.NewReaderSize(in, maxIDLine)
	send := func(x input) bool {
		select {
		case lines <- x:
			return true
		case <-stop:
			return false
		}
	}
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			line, err = []byte("line too long"), nil
		case err != nil && len(line) > 0:
			err = nil // a last line without a newline is still an id
		}
		if err != nil {
			send(input{err: err})
			return
		}
		line = bytes.Clone(bytes.TrimRight(line, "\r\n"))
		more := bytes.IndexByte(peekBuffered(br), '\n') >= 0
		if !send(input{line: line, more: more}) {
			return
		}
	}
}

func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// idLine is a line of input: a message id, and its pass's token (0: the
// line had none).
type idLine struct {
	id, pass int64
	trace    string // the pass span's traceparent; "": none
}

// message is the Message of the pass the line hands out, its rows not
// read yet.
func (l idLine) message() *Message { return &Message{ID: l.id, Pass: l.pass, Traceparent: l.trace} }

// parseID reads an id line, "ID", "ID TOKEN" or "ID TOKEN TRACEPARENT"
// (protocol.ParseID).
func parseID(line []byte) (idLine, error) {
	l, err := protocol.ParseID(line)
	return idLine{id: l.ID, pass: l.Token, trace: l.Trace}, err
}
