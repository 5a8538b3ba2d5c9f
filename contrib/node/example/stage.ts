// contrib/node/example/stage.ts — an example pepsi stage program in
// TypeScript, on the package @pepsi/stage (contrib/node).
//
// It does exactly what contrib/go/stage, contrib/shell/stage.sh and
// contrib/python/stage.py do:
//   - adds the header STAGE = "node" to the message (work in its transaction);
//   - fails an empty payload: "empty payload";
//   - pauses the payload "retry" for a second on its first attempt at a stage;
//   - otherwise advances the message to the stage given by --next, or
//     finishes it when there is none.
//
// Compiled (npm run build:test puts it in build/example/stage.js), it is
// named in pepsi.conf with the node that runs it:
//
//   [stage-parse]
//   PROGRAM = /usr/bin/node /usr/local/lib/pepsi/stage.js --next deliver
//
// run does the protocol (pepsi-worker(7)): the -c argument, one connection,
// a transaction per message, the move, the pass token, the status line, 75
// on a lost connection, SIGTERM.

import { parseArgs } from "node:util";

import { type Message, type Move, type Tx, advance, fail, finish, pause, run } from "@pepsi/stage";

// -c CONFIG_FILE is run's; strict: false lets it through.
const { values } = parseArgs({ options: { next: { type: "string", default: "" } }, strict: false });
const next = String(values.next ?? "");

async function stage(m: Message, tx: Tx): Promise<Move> {
  await tx.query("UPDATE pepsi.message SET headers = headers || jsonb_build_object($1::text, 'node') WHERE id = $2", [
    m.stage,
    m.id,
  ]);
  if (m.payload.length === 0) {
    return fail("empty payload");
  }
  if (m.payload.toString() === "retry" && m.attempts === 1) {
    return pause(1);
  }
  return next ? advance(next) : finish();
}

run(stage);
