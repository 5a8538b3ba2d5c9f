#!/usr/bin/env python3
"""contrib/python/invoice.py: the join stage of README's "Fan-out and fan-in".

The order was fanned out by contrib/go/orderlines (split) into one message
per line item, priced at the stage price; once every one has ended, the
order comes here and reads their results. It writes the table invoices
(order_id bigint PRIMARY KEY, total bigint, lines int, failed int).

    [stage-invoice]
    PROGRAM = /opt/pepsi-stage/bin/python /usr/local/lib/pepsi/invoice.py
    JOIN_POLICY = all   ; the default, fail, never runs it with a failed line
"""

import json

from pepsi_stage import Cursor, Finish, Message, Move, run


def invoice(m: Message, cur: Cursor) -> Move:
    lines = m.children(cur)  # in the order spawned: id, stage, status, error, result
    done = [json.loads(c.result or b"{}") for c in lines if c.status == "done"]
    failed = len(lines) - len(done)  # only with JOIN_POLICY = all
    cur.execute(
        "INSERT INTO invoices (order_id, total, lines, failed) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (m.id, sum(d["amount"] for d in done), len(done), failed),
    )
    return Finish()


if __name__ == "__main__":
    run(invoice)
