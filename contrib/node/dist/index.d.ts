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
import { type Handler } from "./runner";
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
/** Serve handler on stdin and stdout as a stage program; resolve to the
 * exit status: 0 at end of file or after SIGTERM or SIGINT, 75 when the
 * database cannot be reached (at start, or again after a lost connection),
 * 1 when stdin or stdout breaks, 2 for a configuration error. */
export declare function main(handler: Handler, opts?: MainOptions): Promise<number>;
/** Serve handler as a stage program (see main) and exit with its status. */
export declare function run(handler: Handler, opts?: MainOptions): void;
