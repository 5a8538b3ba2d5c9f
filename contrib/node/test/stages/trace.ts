// A stage program for contrib/trace_test.go: records the traceparent its
// pass was given (with a statement queued with the move), then advances
// the message to --next.

import { parseArgs } from "node:util";

import { advance, run } from "@pepsi/stage";

const { values } = parseArgs({ options: { next: { type: "string", default: "" } }, strict: false });
const next = advance(String(values.next ?? ""));

run((m) => {
  m.queue("INSERT INTO seen_trace (id, stage, traceparent) VALUES ($1, $2, $3)", [m.id, m.stage, m.traceparent]);
  return next;
});
