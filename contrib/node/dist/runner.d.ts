import type { LineReader } from "./lines";
import { Message, type Tx } from "./message";
import { type Move } from "./moves";
/** A stage: does the work for one message in the pass's transaction (tx)
 * and says its move, returned or resolved. */
export type Handler = (m: Message, tx: Tx) => Move | Promise<Move>;
/** What a Runner needs besides its handler. */
export interface RunnerOptions {
    /** The database, as a postgres:// URL or a libpq keyword/value DSN. */
    dsn: string;
    /** application_name, unless the DSN names one. */
    appName: string;
    /** Writes a status line whole, resolving once it is written. */
    write: (line: string) => Promise<void>;
    /** Writes one log line to stderr. */
    log: (line: string) => void;
}
/** Serves id lines with a handler on one connection, a transaction a
 * pass; see main for what the program does. */
export declare class Runner {
    private readonly handler;
    private readonly lines;
    private readonly opts;
    private conn;
    private stopping;
    private busy;
    private readonly abort;
    constructor(handler: Handler, lines: LineReader, opts: RunnerOptions);
    /** Stop: at once when idle, else after the pass in hand. */
    stop(): void;
    /** Connect, then serve until end of file or a stop (0), a connection
     * that cannot be made again (75), or a failure to read stdin or write
     * stdout (1). */
    loop(): Promise<number>;
    private serveLines;
    private reconnect;
    private close;
    /** One id line's answer; null when the pass is to be left unanswered. */
    private serve;
    /** Roll back what a failed pass left open, and say whether the
     * connection is lost. */
    private lost;
    /** A pass: BEGIN and the read, the handler, then its queued statements,
     * the move and COMMIT. */
    private pass;
}
