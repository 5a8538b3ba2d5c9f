package worker_test

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// A stage program: it parses the payload as JSON, keeps it in a table of
// the application in the message's own transaction, and sends the message
// on to the stage "deliver". Bad JSON is a dead letter, a busy table is
// tried again later, anything else that goes wrong fails the pass.
// Build it, and name it in pepsi.conf:
//
//	[stage-parse]
//	PROGRAM = /usr/local/lib/pepsi/parse
func Example() {
	worker.Main(func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		var order struct {
			Customer string  `json:"customer"`
			Amount   float64 `json:"amount"`
		}
		if err := json.Unmarshal(m.Payload, &order); err != nil {
			return worker.Fail("parse: " + err.Error()), nil
		}
		tag, err := m.Tx.Exec(ctx,
			`INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3)
			 ON CONFLICT (id) DO NOTHING`, // at-least-once: a second pass is harmless
			m.ID, order.Customer, order.Amount)
		if err != nil {
			return worker.Move{}, err
		}
		if tag.RowsAffected() == 0 && m.Attempts < 3 {
			return worker.Pause(5 * time.Second), nil
		}
		return worker.Advance("deliver"), nil
	})
}
