/**
 * @pepsi/stage: pepsi stage programs in TypeScript (or JavaScript), the
 * stage side of the worker protocol (pepsi-worker(7)) around one function,
 * as Go's pkg/worker and Python's pepsi_stage.
 *
 * A stage is a handler and a call to run:
 *
 *     import { advance, fail, run } from "@pepsi/stage";
 *
 *     run(async (m, tx) => {
 *       if (m.payload.length === 0) return fail("empty payload");
 *       await tx.query("INSERT INTO seen (id) VALUES ($1) ON CONFLICT DO NOTHING", [m.id]);
 *       return advance("deliver");
 *     });
 *
 * run reads -c FILE (the dispatcher appends it to PROGRAM; other arguments
 * are the stage's own), connects to the database once ($PEPSI_DSN, which
 * the dispatcher sets, else [database] DSN of the configuration file), and
 * serves message ids from stdin until end of file. Each pass is a
 * transaction: BEGIN and the read of the message (one round trip), the
 * handler with the Message and the transaction's client, then the move it
 * returns, made with the SQL API (pepsi.advance, finish, pause, fail,
 * join) and COMMIT (one round trip), before the answer "0".
 *
 * A handler that throws rolls the pass back and answers "1 # reason". A
 * lost connection answers 75 (the message is put back, not counted), and
 * run connects again; it exits 75 if it cannot. SIGTERM (or SIGINT) lets
 * the pass in hand end, committed and answered, then exits 0; at once when
 * there is none. When $PEPSI_PROTOCOL is 2 or more, run asks for pass
 * tokens ("hello token") and presents each pass's token on its move; from
 * 3 on it asks for trace contexts too ("hello token trace"), and a
 * dispatcher with TRACING on gives each pass its span's W3C traceparent,
 * which the handler finds in Message.traceparent.
 */

import { basename } from "node:path";
import { writeSync } from "node:fs";

import { ConfigError, configArg, connectionString, resolveDsn } from "./config";
import { LineReader } from "./lines";
import { HELLO_TOKEN, HELLO_TRACE, envProtocol, oneLine } from "./protocol";
import { type Handler, Runner } from "./runner";

export { ConfigError, DEFAULT_PATH, configArg, connectionString, defaultUser, iniDsn, parseKeywords, resolveDsn } from "./config";
export { type Child, Message, type MessageFields, type SpawnOptions, type Tx } from "./message";
export { MAX_RESULT, type Move, PassError, advance, checkMove, fail, finish, join, pause } from "./moves";
export { type Fused, HELLO_TOKEN, HELLO_TRACE, type IdLine, NOT_RUN, checkStage, envProtocol, parseIdLine, statusLine } from "./protocol";
export { type Handler } from "./runner";

/** What main takes besides the handler; each defaults to the process's. */
export interface MainOptions {
  /** The arguments after the script (process.argv.slice(2)). */
  argv?: readonly string[];
  /** The program's name in its log lines (the script's file name). */
  name?: string;
}

/** A log line on stderr, written at once (as a dispatcher's log line). */
function logTo(name: string): (line: string) => void {
  return (line: string) => {
    const text = `${name}: ${line}\n`;
    try {
      writeSync(2, text);
    } catch {
      process.stderr.write(text); // EAGAIN on a full pipe: queue it instead
    }
  };
}

/** Status lines go to stdout through its write as the program found it,
 * each resolved once written; process.stdout.write itself (console.log,
 * say) goes to stderr from then on, so that a handler's output is a log
 * line, not a protocol error. */
function protocolWriter(): (line: string) => Promise<void> {
  const out = process.stdout;
  const write = out.write.bind(out) as (chunk: string, cb: (err?: Error | null) => void) => boolean;
  out.on("error", () => undefined); // reported to write's callback
  out.write = process.stderr.write.bind(process.stderr) as typeof out.write;
  return (line: string) =>
    new Promise<void>((resolve, reject) => {
      write(line, (err) => (err ? reject(err) : resolve()));
    });
}

/** Serve handler on stdin and stdout as a stage program; resolve to the
 * exit status: 0 at end of file or after SIGTERM or SIGINT, 75 when the
 * database cannot be reached (at start, or again after a lost connection),
 * 1 when stdin or stdout breaks, 2 for a configuration error. */
export async function main(handler: Handler, opts: MainOptions = {}): Promise<number> {
  const name = opts.name ?? basename(process.argv[1] ?? "pepsi-stage");
  const log = logTo(name);
  let dsn: string;
  try {
    dsn = resolveDsn(configArg(opts.argv ?? process.argv.slice(2)));
    connectionString(dsn); // a DSN pg cannot take is a configuration error
  } catch (e) {
    if (e instanceof ConfigError) {
      log(e.message);
      return 2;
    }
    throw e;
  }
  const stage = process.env.PEPSI_STAGE ?? "";
  const write = protocolWriter();
  const lines = new LineReader(process.stdin);
  const runner = new Runner(handler, lines, { dsn, appName: "pepsi-worker " + (stage || name), write, log });
  const stop = (): void => runner.stop();
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  try {
    const protocol = envProtocol();
    if (protocol >= 2) {
      // First, before connecting: ids the dispatcher writes before it reads
      // the hello come without their tokens.
      try {
        await write((protocol >= 3 ? HELLO_TRACE : HELLO_TOKEN) + "\n");
      } catch (e) {
        log(`writing the hello line: ${oneLine(String(e))}`);
        return 1;
      }
    }
    return await runner.loop();
  } finally {
    process.off("SIGTERM", stop);
    process.off("SIGINT", stop);
  }
}

/** Serve handler as a stage program (see main) and exit with its status. */
export function run(handler: Handler, opts: MainOptions = {}): void {
  main(handler, opts).then(
    (code) => process.exit(code),
    (err: unknown) => {
      logTo(opts.name ?? basename(process.argv[1] ?? "pepsi-stage"))(
        `internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`,
      );
      process.exit(1);
    },
  );
}
