// bench/peers/kitstage.js: the real work of bench/peers' pipelines as a
// stage on the package @pepsi/stage (contrib/node), written as its README
// shows a stage: UPDATE acct SET n = n + 1 WHERE id = id % 10000 + 1 on
// the pass's transaction, then the move (--next STAGE, or finish).
//
// bench/peers writes it out (it is embedded in the binary) into a
// directory where the package is installed, and runs it with node.
"use strict";
const { parseArgs } = require("node:util");
const { advance, finish, run } = require("@pepsi/stage");

const { values } = parseArgs({ options: { next: { type: "string", default: "" } }, strict: false });
const move = values.next ? advance(values.next) : finish();

run(async (m, tx) => {
  await tx.query("UPDATE acct SET n = n + 1 WHERE id = $1", [Number(m.id % 10000n) + 1]);
  return move;
});
