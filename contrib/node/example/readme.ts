// README.md's and contrib/node/README.md's TypeScript stage, word for
// word (contrib/node_test.go's TestNodeReadme checks it), so that the
// tests' build (npm run build:test) type-checks it. It is not run.

// PROGRAM = /usr/bin/node /usr/local/lib/pepsi/stage.js
import { advance, fail, run } from "@pepsi/stage";

run(async (m, tx) => {
  if (m.payload.length === 0) return fail("empty payload"); // failed: a dead letter
  await tx.query("INSERT INTO seen (id) VALUES ($1) ON CONFLICT DO NOTHING", [m.id]);
  return advance("deliver"); // or finish(), pause(seconds), join(stage)
});
