// @pepsi/stage under a real `pepsi dispatch` (@pepsi/stage/testing): the
// example stage's moves, and a fan-out and its join. Needs PostgreSQL
// ($PEPSI_TEST_DSN) and the pepsi binary ($PEPSI_BIN); contrib/node_test.go
// runs these tests with both, and the pipeline of three languages
// (TypeScript, Python, Go) itself.

import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";

import { Pipeline, program, runStage } from "@pepsi/stage/testing";

const build = join(__dirname, "..");

test("runStage: the example stage's moves", async () => {
  const rows = await runStage(join(build, "example", "stage.js"), ["hello", "", "retry"]);
  assert.deepEqual(
    rows.map((r) => [r.status, r.error, r.attempts]),
    [
      ["done", "", 1],
      ["failed", "empty payload", 1],
      ["done", "", 2],
    ],
  );
  assert.deepEqual(rows[0].headers, { test: "node" });
});

test("a fan-out and its join", async () => {
  const graph = program(join(build, "test", "stages", "graph.js"));
  const p = await Pipeline.create([
    { name: "split", program: graph, parallelism: 2, queueLimit: 4 },
    { name: "item", program: graph, parallelism: 2, queueLimit: 8 },
    { name: "sum", program: graph, queueLimit: 4 },
  ]);
  try {
    await p.conn.query("CREATE TABLE test_joined (id bigint, n int, ok bool)");
    const sizes = [3, 0, 4, 1, 2];
    const ids = await p.enqueue("split", ...sizes.map(String));
    await p.waitSettled();
    for (const [i, id] of ids.entries()) {
      const r = await p.row(id);
      assert.deepEqual([r.status, r.stage, r.dispatchError], ["done", "sum", ""], `order ${id}`);
      const j = await p.conn.query("SELECT n, ok FROM test_joined WHERE id = $1", [id]);
      assert.deepEqual(j.rows, [{ n: sizes[i], ok: true }], `order ${id}`);
    }
    assert.equal(Number(await p.one("SELECT count(*) FROM pepsi.state WHERE parent IS NOT NULL AND status = 'done'")), 10);
    assert.deepEqual(await p.check(), [], p.logs());
  } finally {
    await p.close();
  }
});
