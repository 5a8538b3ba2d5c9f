// Command orderlines is the Go half of README's "Fan-out and fan-in": it
// serves two stages, split (an order, fanned out into one message per line
// item, which join at invoice) and price (one line item, priced, its
// amount left as its result). contrib/python/invoice.py is the join.
//
//	[stage-split]
//	PROGRAM = /usr/local/lib/pepsi/orderlines
//	[stage-price]
//	PROGRAM = /usr/local/lib/pepsi/orderlines
//
// It reads the table prices (sku text PRIMARY KEY, cents bigint).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/worker"
)

func main() {
	worker.Main(func(ctx context.Context, m *worker.Message) (worker.Move, error) {
		if m.Stage == "split" { // {"lines": [{"sku": "A-1", "qty": 2}, ...]}
			var order struct{ Lines []json.RawMessage }
			if err := json.Unmarshal(m.Payload, &order); err != nil {
				return worker.Fail("split: " + err.Error()), nil
			}
			lines := make([][]byte, len(order.Lines))
			for i, l := range order.Lines {
				lines[i] = l
			}
			// The children commit with the move, or not at all.
			if _, err := m.SpawnMany(ctx, "price", lines, nil); err != nil {
				return worker.Move{}, err
			}
			return worker.Join("invoice"), nil // no lines: on to invoice at once
		}
		var line struct {
			SKU string
			Qty int64
		}
		if err := json.Unmarshal(m.Payload, &line); err != nil {
			return worker.Fail("price: " + err.Error()), nil
		}
		var cents int64
		switch err := m.Tx.QueryRow(ctx, "SELECT cents FROM prices WHERE sku = $1", line.SKU).Scan(&cents); {
		case errors.Is(err, pgx.ErrNoRows):
			return worker.Fail("price: no price for " + line.SKU), nil // its order fails (JOIN_POLICY = fail)
		case err != nil:
			return worker.Move{}, err
		}
		result := fmt.Appendf(nil, `{"sku": %q, "amount": %d}`, line.SKU, cents*line.Qty)
		return worker.FinishWith(result), nil // at most 64 KiB, read by the join
	})
}
