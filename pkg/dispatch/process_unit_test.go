package dispatch

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

// TestReadLine: lines longer than a worker's stdout buffer, up to
// protocol.MaxLine (plus CR LF), come whole; one longer is an error; a last
// line without a newline is a line; CR LF ends a line as LF does.
func TestReadLine(t *testing.T) {
	at := func(n int) string { return "0 # " + strings.Repeat("x", n-4) }
	in := strings.Join([]string{
		"0",
		"1 # short\r",
		at(answerBuf - 1),
		at(answerBuf),
		at(answerBuf + 1),
		at(3*answerBuf + 7),
		at(protocol.MaxLine) + "\r",
		at(protocol.MaxLine),
		"2",
	}, "\n") + "\n" + "0 # last, no newline"
	want := []string{"0", "1 # short", at(answerBuf - 1), at(answerBuf), at(answerBuf + 1), at(3*answerBuf + 7),
		at(protocol.MaxLine), at(protocol.MaxLine), "2", "0 # last, no newline"}
	br := bufio.NewReaderSize(strings.NewReader(in), answerBuf)
	for i, w := range want {
		got, err := readLine(br)
		if err != nil || string(got) != w {
			t.Fatalf("line %d: %d bytes, %v; want %d bytes", i, len(got), err, len(w))
		}
	}
	if got, err := readLine(br); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last line: %q, %v; want EOF", got, err)
	}

	for _, n := range []int{protocol.MaxLine + 2, protocol.MaxLine + answerBuf, 5 * protocol.MaxLine} {
		br := bufio.NewReaderSize(strings.NewReader(at(n)+"\n0\n"), answerBuf)
		if got, err := readLine(br); !errors.Is(err, errLongLine) {
			t.Errorf("a line of %d bytes: %d bytes, %v; want %v", n, len(got), err, errLongLine)
		}
	}
}
