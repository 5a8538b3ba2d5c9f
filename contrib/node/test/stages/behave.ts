// A stage program for the tests (contrib/node_test.go's pipeline of three
// languages). A payload "STAGE:ACTION" says what the stage named STAGE does
// with the message; any other stage passes it on. The default is to
// advance it to --next, or finish it without one.
//
//   fail    fail("asked to fail")
//   pause   pause(0.2) on the first attempt, then the default
//   raise   throws Error("asked to raise") after its work
//   kill    the first time: terminates its own database session (75)
//   term    marks "term" with its pid, waits until the program is told to
//           stop (m.signal), then does its work and finishes it here
//   quit    as term, but throws once told to stop: the pass is rolled
//           back and left unanswered
//   finish  finish() here
//   print   console.log (which run makes a log line), then the default
//   sync    the default at once, returned, not a promise, with no work
//   qfail   queues a statement that fails (division by zero) with the move
//
// Every other pass does work: a row in test_work (id, stage, token, pid),
// in the pass's transaction, and a header STAGE = "node", a statement
// queued with the move (Message.queue). Marks
// (test_marks) are committed at once, on a connection of their own.

import { parseArgs } from "node:util";

import { Client } from "pg";

import { type Message, type Move, type Tx, advance, connectionString, fail, finish, pause, run } from "@pepsi/stage";

const { values } = parseArgs({ options: { next: { type: "string", default: "" } }, strict: false });
const next = String(values.next ?? "");

/** Record what for m at once; whether it was recorded before. */
async function mark(m: Message, what: string): Promise<boolean> {
  const c = new Client({ connectionString: connectionString(process.env.PEPSI_DSN ?? "") });
  await c.connect();
  try {
    const r = await c.query("SELECT count(*)::int AS n FROM test_marks WHERE id = $1 AND what = $2", [m.id, what]);
    await c.query("INSERT INTO test_marks (id, what, pid) VALUES ($1, $2, $3)", [m.id, what, process.pid]);
    return (r.rows[0] as { n: number }).n > 0;
  } finally {
    await c.end();
  }
}

function action(m: Message): string {
  const [stage, act] = m.payload.toString().split(":", 2);
  return stage === m.stage ? (act ?? "") : "";
}

function byDefault(): Move {
  return next ? advance(next) : finish();
}

async function stopped(m: Message): Promise<void> {
  if (m.signal.aborted) {
    return;
  }
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("not told to stop within 30 s")), 30_000);
    m.signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });
}

async function work(m: Message, tx: Tx, act: string): Promise<Move> {
  if (act === "term" || act === "quit") {
    await mark(m, act);
    await stopped(m);
  }
  if (act === "quit") {
    await tx.query("INSERT INTO test_work (id, stage, token, pid) VALUES ($1, $2, $3, $4)", [m.id, m.stage, m.token, process.pid]);
    throw new Error("told to stop: giving up");
  }
  await tx.query("INSERT INTO test_work (id, stage, token, pid) VALUES ($1, $2, $3, $4)", [
    m.id,
    m.stage,
    m.token,
    process.pid,
  ]);
  // A -- comment and a '$9' in quotes, which are not placeholders.
  m.queue("UPDATE pepsi.message SET headers = headers || jsonb_build_object($1::text, 'node') -- no $9\n WHERE id = $2 AND '$9' <> ''", [
    m.stage,
    m.id,
  ]);
  if (act === "qfail") {
    m.queue("SELECT 1 / $1::int", [0]);
  }
  if (act === "kill" && !(await mark(m, "killed"))) {
    await tx.query("SELECT pg_terminate_backend(pg_backend_pid())");
  }
  switch (act) {
    case "fail":
      return fail("asked to fail");
    case "pause":
      return m.attempts === 1 ? pause(0.2) : byDefault();
    case "raise":
      throw new Error("asked to raise");
    case "finish":
    case "term":
      return finish();
    case "print":
      console.log("a print in a handler");
  }
  return byDefault();
}

function handle(m: Message, tx: Tx): Move | Promise<Move> {
  const act = action(m);
  if (act === "sync") {
    return byDefault();
  }
  return work(m, tx, act);
}

run(handle);
