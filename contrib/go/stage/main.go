// Command stage is an example pepsi stage program written with pkg/worker.
// The shell and Python examples beside it do exactly the same, so that all
// three can be compared line by line (and are tested alike):
//
//   - it records that it saw the message: the header STAGE = "go" is added
//     to the message (work done in the message's own transaction);
//   - an empty payload fails the message: "empty payload";
//   - the payload "retry" is paused for a second on its first attempt at
//     each stage, to show a retry;
//   - otherwise the message goes on to the stage given by --next, or is
//     finished when there is none.
//
// In pepsi.conf:
//
//	[stage-parse]
//	PROGRAM = /usr/local/lib/pepsi/stage --next deliver
//	[stage-deliver]
//	PROGRAM = /usr/local/lib/pepsi/stage
//
// The dispatcher appends -c CONFIG_FILE, which worker.Main reads.
package main

import (
	"context"
	"flag"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

var next = flag.String("next", "", "advance messages to `STAGE` (default: finish them)")

func stage(_ context.Context, m *worker.Message) (worker.Move, error) {
	// Its result is not needed: it goes out with the move and COMMIT, in
	// one round trip. Should it fail, the pass is rolled back and the
	// message fails with its error.
	m.Queue("UPDATE pepsi.message SET headers = headers || jsonb_build_object($2::text, 'go') WHERE id = $1",
		m.ID, m.Stage)
	switch {
	case len(m.Payload) == 0:
		return worker.Fail("empty payload"), nil
	case string(m.Payload) == "retry" && m.Attempts == 1:
		return worker.Pause(time.Second), nil
	case *next != "":
		return worker.Advance(*next), nil
	}
	return worker.Finish(), nil
}

func main() { worker.Main(stage) }
