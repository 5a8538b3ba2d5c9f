#!/usr/bin/env python3
"""A stage program for the package's graph test; what it does is by its stage:

  split  a payload "N": N children at item (queued with the move when N is
         odd, on the cursor when even), then Join("sum")
  item   (async) Finish(result=b"r" + payload)
  sum    reads the children (Message.children) and records in test_joined
         how many, and whether each is done with its result, in order
"""

import os

from pepsi_stage import AsyncCursor, Cursor, Finish, Join, Message, Move, run


def split(m: Message, cur: Cursor) -> Move:
    n = int(m.payload)
    items = [str(i).encode() for i in range(n)]
    if n % 2:
        m.spawn_many(None, "item", items, headers={"order": str(m.id)})
    else:
        made = m.spawn_many(cur, "item", items, headers={"order": str(m.id)})
        assert made == n, made
    return Join("sum")


async def item(m: Message, cur: AsyncCursor) -> Move:
    return Finish(result=b"r" + m.payload)


def join(m: Message, cur: Cursor) -> Move:
    kids = m.children(cur)
    ok = all(c.status == "done" and c.stage == "item" and c.error is None and c.result == f"r{i}".encode() for i, c in enumerate(kids))
    cur.execute("INSERT INTO test_joined (id, n, ok) VALUES (%s, %s, %s)", (m.id, len(kids), ok))
    return Finish()


if __name__ == "__main__":
    stage = os.environ.get("PEPSI_STAGE", "")
    if stage == "item":
        run(item)
    run(join if stage == "sum" else split)
