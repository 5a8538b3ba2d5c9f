// A stage program for the graph test; what it does is by its stage:
//
//   split  a payload "N": N children at item (spawnMany when N is even,
//          one spawn each, the first with a key, when odd), then join("sum")
//   item   finish("r" + payload): a result for the join
//   sum    reads the children (Message.children) and records in
//          test_joined how many, and whether each is done with its
//          result, in order

import { type Message, type Move, type Tx, finish, join, run } from "@pepsi/stage";

async function split(m: Message): Promise<Move> {
  const n = Number(m.payload.toString());
  const items = Array.from({ length: n }, (_, i) => String(i));
  const headers = { order: String(m.id) };
  if (n % 2 === 0) {
    const made = await m.spawnMany("item", items, { headers });
    if (made !== n) {
      throw new Error(`spawnMany made ${made}, want ${n}`);
    }
  } else {
    for (const [i, item] of items.entries()) {
      const id = await m.spawn("item", item, { headers, key: i === 0 ? `first-of-${m.id}` : undefined });
      if (id <= m.id) {
        throw new Error(`child ${id} of ${m.id}`);
      }
    }
  }
  return join("sum");
}

function item(m: Message): Move {
  return finish("r" + m.payload.toString());
}

async function sum(m: Message, tx: Tx): Promise<Move> {
  const kids = await m.children();
  const ok = kids.every(
    (c, i) => c.status === "done" && c.stage === "item" && c.error === null && c.result?.toString() === `r${i}`,
  );
  await tx.query("INSERT INTO test_joined (id, n, ok) VALUES ($1, $2, $3)", [m.id, kids.length, ok]);
  return finish();
}

const stage = process.env.PEPSI_STAGE ?? "";
run(stage === "item" ? item : stage === "sum" ? sum : split);
