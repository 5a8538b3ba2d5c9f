// @pepsi/stage under a real `pepsi dispatch` (@pepsi/stage/testing): the
// example stage's moves, a fan-out and its join, and a handler that gives
// up on SIGTERM. Needs PostgreSQL
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

test("SIGTERM: a handler that throws once told to stop leaves its pass rolled back, unanswered", async () => {
  const behave = program(join(build, "test", "stages", "behave.js"));
  const p = await Pipeline.create([{ name: "t", program: behave, queueLimit: 2 }], { SHUTDOWN_GRACE: "60" });
  try {
    await p.conn.query("CREATE TABLE test_work (id bigint, stage text, token bigint, pid int); CREATE TABLE test_marks (id bigint, what text, pid int)");
    const [id] = await p.enqueue("t", "t:quit");
    await p.waitFor("the pass under way", 60, async () => Number(await p.one("SELECT count(*) FROM test_marks")) === 1);
    const pid = Number(await p.one("SELECT pid FROM test_marks"));
    const start = Date.now();
    assert.equal(await p.stop(), 0);
    assert.ok(Date.now() - start < 30_000, "the worker waited for SIGKILL (SHUTDOWN_GRACE 60 s)");
    assert.throws(() => process.kill(pid, 0), { code: "ESRCH" }, `worker ${pid} still runs`);
    const r = await p.row(id);
    assert.deepEqual([r.status, r.stage, r.dispatchError], ["pending", "t", ""], p.logs());
    assert.equal(Number(await p.one("SELECT count(*) FROM test_work")), 0, "the work of the pass was committed");
    assert.match(p.logs(), /message \d+ left unanswered: told to stop, and the handler failed: Error: told to stop: giving up/);
    assert.deepEqual(await p.check(), [], p.logs());
  } finally {
    await p.close();
  }
});
