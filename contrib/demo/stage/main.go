// Command stage is the demo pipeline's stage program (`make demo`): one
// binary for the three stages parse → enrich → deliver, the stage chosen by
// PEPSI_STAGE, which the dispatcher sets. Each stage is one function on
// pkg/worker; all their work is in the demo schema of the same database,
// in the message's own transaction.
//
//   - parse reads the order (JSON) into demo.orders; a malformed payload
//     is a dead letter: failed, with the parse error as the reason.
//   - enrich looks the customer up in demo.customer and prices the order
//     (tier discount); an unknown customer is a dead letter.
//   - deliver pretends to call a flaky endpoint: about one call in five is
//     refused, and the message is paused for a retry 1 s later (2 s the
//     second time); after three refusals it fails.
//
// The "endpoint" is a hash of the message id and the attempt, so a run is
// reproducible and a retry can succeed.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

// order is what the demo's generator puts in a payload.
type order struct {
	Order    int64   `json:"order"`
	Customer string  `json:"customer"`
	Amount   float64 `json:"amount"`
	Items    int     `json:"items"`
}

// parse: payload → demo.orders; malformed → failed.
func parse(ctx context.Context, m *worker.Message) (worker.Move, error) {
	var o order
	if err := json.Unmarshal(m.Payload, &o); err != nil {
		return worker.Fail("parse: " + err.Error()), nil
	}
	if o.Customer == "" || o.Items <= 0 {
		return worker.Fail("parse: order without customer or items"), nil
	}
	// At-least-once: a second pass over the same message must be harmless.
	_, err := m.Tx.Exec(ctx, `
		INSERT INTO demo.orders (id, order_no, customer, amount, items) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET order_no = EXCLUDED.order_no, customer = EXCLUDED.customer,
		       amount = EXCLUDED.amount, items = EXCLUDED.items`,
		m.ID, o.Order, o.Customer, o.Amount, o.Items)
	if err != nil {
		return worker.Move{}, err
	}
	return worker.Advance("enrich"), nil
}

// enrich: customer → tier, region and the price after the tier's discount.
func enrich(ctx context.Context, m *worker.Message) (worker.Move, error) {
	tag, err := m.Tx.Exec(ctx, `
		UPDATE demo.orders o
		   SET tier = c.tier, region = c.region,
		       total = round(o.amount * (1 - CASE c.tier WHEN 'gold' THEN 0.10 WHEN 'silver' THEN 0.05 ELSE 0 END), 2)
		  FROM demo.customer c
		 WHERE o.id = $1 AND c.id = o.customer`, m.ID)
	if err != nil {
		return worker.Move{}, err
	}
	if tag.RowsAffected() == 0 {
		var customer string
		_ = m.Tx.QueryRow(ctx, "SELECT customer FROM demo.orders WHERE id = $1", m.ID).Scan(&customer)
		return worker.Fail("enrich: unknown customer " + customer), nil
	}
	return worker.Advance("deliver"), nil
}

// deliverTries is how many refusals make a delivery fail.
const deliverTries = 3

// deliver: "send" the order; a refusal pauses it for a retry.
func deliver(ctx context.Context, m *worker.Message) (worker.Move, error) {
	if _, err := m.Tx.Exec(ctx, "UPDATE demo.orders SET tries = tries + 1 WHERE id = $1", m.ID); err != nil {
		return worker.Move{}, err
	}
	if refused(m.ID, m.Attempts) {
		if m.Attempts >= deliverTries {
			return worker.Fail(fmt.Sprintf("deliver: endpoint refused %d times", m.Attempts)), nil
		}
		return worker.Pause(time.Duration(m.Attempts) * time.Second), nil
	}
	if _, err := m.Tx.Exec(ctx, "UPDATE demo.orders SET delivered_at = now() WHERE id = $1", m.ID); err != nil {
		return worker.Move{}, err
	}
	return worker.Finish(), nil
}

// refused is the flaky endpoint: true for about one call in five.
func refused(id int64, attempt int) bool {
	return rand.New(rand.NewPCG(uint64(id), uint64(attempt))).IntN(5) == 0
}

func main() {
	stages := map[string]worker.Func{"parse": parse, "enrich": enrich, "deliver": deliver}
	fn, ok := stages[os.Getenv("PEPSI_STAGE")]
	if !ok {
		fmt.Fprintf(os.Stderr, "pepsi-demo-stage: PEPSI_STAGE=%q: want parse, enrich or deliver\n", os.Getenv("PEPSI_STAGE"))
		os.Exit(2)
	}
	worker.Main(fn)
}
