// Command noopstage is the cheapest stage program, for tests that push
// many passes through a dispatcher: it asks for trace contexts when the
// dispatcher speaks protocol 3 (and ignores them), and answers every id
// "0 done", writing when no more ids are buffered.
package main

import (
	"bufio"
	"os"
	"strconv"

	"github.com/pepsi-dev/pepsi/pkg/protocol"
)

func main() {
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	if v, _ := strconv.Atoi(os.Getenv(protocol.EnvProtocol)); v >= 3 {
		out.WriteString(protocol.HelloTrace + "\n")
	}
	for {
		line, err := in.ReadSlice('\n')
		if err != nil {
			out.Flush()
			return
		}
		if _, err := protocol.ParseID(line[:len(line)-1]); err != nil {
			out.WriteString("1 # bad id line\n")
		} else {
			out.WriteString("0 done\n")
		}
		if in.Buffered() == 0 {
			if out.Flush() != nil {
				return
			}
		}
	}
}
