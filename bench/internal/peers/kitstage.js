// bench/peers/kitstage.js: the real work of bench/peers' pipelines as a
// stage on the package @pepsi/stage (contrib/node), written as the Python
// package's stage (kitstage.py): UPDATE acct SET n = n + 1 WHERE id = id %
// 10000 + 1 queued in the pass's transaction (m.queue), sent with the move
// (--next STAGE, or finish) and COMMIT.
//
// bench/peers writes it out (it is embedded in the binary) into a
// directory where the package is installed, and runs it with node.
"use strict";
const { parseArgs } = require("node:util");
const { advance, finish, run } = require("@pepsi/stage");

const { values } = parseArgs({ options: { next: { type: "string", default: "" } }, strict: false });
const move = values.next ? advance(values.next) : finish();

run((m) => {
  // Its result is not needed: it goes out with the move and COMMIT.
  m.queue("UPDATE acct SET n = n + 1 WHERE id = $1", [Number(m.id % 10000n) + 1]);
  return move;
});
