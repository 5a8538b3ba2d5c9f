// The loop that serves id lines with a handler, one transaction a pass.

import { Client, DatabaseError, type QueryResult } from "pg";

import { connectionString } from "./config";
import type { LineReader } from "./lines";
import { Message, type Tx, fusedError } from "./message";
import { type Move, PassError, checkMove } from "./moves";
import { type Fused, NOT_RUN, oneLine, parseIdLine, quote, statusLine } from "./protocol";
import { EXPLAIN, type ReadRow, beginRead, moveCommit } from "./sql";

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

/** How often a message is tried when its pass hits a serialization
 * failure or deadlock. */
const MAX_PASSES = 3;

/** An error the handler threw (or its promise rejected with). */
class HandlerError extends Error {
  constructor(readonly thrown: unknown) {
    super("the handler failed");
  }
}

/** An answer: a status line's code, reason and fused stages. */
interface Answer {
  code: number;
  text: string;
  fused: Fused[];
}

/** The worker's one connection, and whether it is gone for good. */
interface Conn {
  client: Client;
  lost: boolean;
}

/** Connects to the database of dsn. */
async function connect(dsn: string, appName: string, log: (line: string) => void): Promise<Conn> {
  const client = new Client({ connectionString: connectionString(dsn), application_name: appName });
  const conn: Conn = { client, lost: false };
  // Without a listener an error on an idle connection would end the process.
  client.on("error", (err: Error) => {
    if (!conn.lost) {
      log(`database connection lost: ${oneLine(err.message)}`);
    }
    conn.lost = true;
  });
  client.on("end", () => {
    conn.lost = true;
  });
  await client.connect();
  return conn;
}

/** Whether err says the connection is gone (not the pass's fault). */
function connectionError(err: unknown): boolean {
  const e = (err instanceof HandlerError ? err.thrown : err) as { code?: unknown; message?: unknown } | null;
  if (e === null || typeof e !== "object") {
    return false;
  }
  const code = typeof e.code === "string" ? e.code : "";
  if (code.startsWith("08") || ["57P01", "57P02", "57P03"].includes(code)) {
    return true; // connection exceptions; the server shutting down or terminating the session
  }
  if (["ECONNRESET", "EPIPE", "ECONNREFUSED", "ETIMEDOUT", "ENOTCONN", "EHOSTUNREACH"].includes(code)) {
    return true;
  }
  const msg = typeof e.message === "string" ? e.message : "";
  return /Connection terminated|not queryable|Client was closed/.test(msg);
}

/** Whether err is a serialization failure or a deadlock, worth a new pass. */
function transient(err: unknown): boolean {
  const e = (err instanceof HandlerError ? err.thrown : err) as { code?: unknown } | null;
  return e !== null && typeof e === "object" && (e.code === "40001" || e.code === "40P01");
}

/** The reason a failed pass gives: a refusal's or the database's message
 * as it is; what the handler threw as "Name: message". */
function reason(err: unknown): string {
  if (err instanceof HandlerError) {
    const t = err.thrown;
    if (t instanceof DatabaseError || t instanceof PassError) {
      return t.message;
    }
    if (t instanceof Error) {
      return t.message ? `${t.name}: ${t.message}` : t.name;
    }
    return `thrown: ${String(t)}`;
  }
  if (err instanceof Error) {
    return err.message || err.name;
  }
  return String(err);
}

/** Serves id lines with a handler on one connection, a transaction a
 * pass; see main for what the program does. */
export class Runner {
  private conn: Conn | null = null;
  private stopping = false;
  private busy = false;
  private readonly abort = new AbortController();

  constructor(
    private readonly handler: Handler,
    private readonly lines: LineReader,
    private readonly opts: RunnerOptions,
  ) {}

  /** Stop: at once when idle, else after the pass in hand. */
  stop(): void {
    this.stopping = true;
    this.abort.abort();
    if (!this.busy) {
      this.lines.interrupt();
    }
  }

  /** Connect, then serve until end of file or a stop (0), a connection
   * that cannot be made again (75), or a failure to read stdin or write
   * stdout (1). */
  async loop(): Promise<number> {
    try {
      this.conn = await connect(this.opts.dsn, this.opts.appName, this.opts.log);
    } catch (e) {
      this.opts.log(`connect to database: ${oneLine(reason(e))}`);
      return NOT_RUN;
    }
    try {
      return await this.serveLines();
    } finally {
      await this.close();
    }
  }

  private async serveLines(): Promise<number> {
    for (;;) {
      if (this.stopping) {
        return 0;
      }
      let line: string | null;
      try {
        line = await this.lines.next();
      } catch (e) {
        this.opts.log(`reading message ids: ${reason(e)}`);
        return 1;
      }
      if (line === null) {
        return 0;
      }
      this.busy = true;
      let a: Answer | null;
      try {
        a = await this.serve(line);
      } finally {
        this.busy = false;
      }
      if (a === null) {
        return 0; // told to stop, the pass rolled back: unanswered, the dispatcher puts it back
      }
      try {
        await this.opts.write(statusOf(a));
      } catch (e) {
        if (this.stopping) {
          return 0;
        }
        this.opts.log(`writing status lines: ${reason(e)}`);
        return 1;
      }
      if (a.code === NOT_RUN && !this.stopping) {
        try {
          await this.reconnect();
        } catch (e) {
          this.opts.log(`connect to database again: ${oneLine(reason(e))}`);
          return NOT_RUN;
        }
      }
    }
  }

  private async reconnect(): Promise<void> {
    await this.close();
    this.conn = await connect(this.opts.dsn, this.opts.appName, this.opts.log);
  }

  private async close(): Promise<void> {
    const c = this.conn;
    this.conn = null;
    if (c === null) {
      return;
    }
    c.lost = true;
    // A dead connection may never say it has ended: wait a second at most.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      c.client.end().catch(() => undefined),
      new Promise((resolve) => {
        timer = setTimeout(resolve, 1000);
      }),
    ]);
    clearTimeout(timer);
  }

  /** One id line's answer; null when the pass is to be left unanswered. */
  private async serve(line: string): Promise<Answer | null> {
    let id: bigint, token: bigint | null, traceparent: string | null;
    try {
      ({ id, token, traceparent } = parseIdLine(line));
    } catch {
      this.opts.log(`bad message id on stdin: ${quote(line)}`);
      return { code: 1, text: "bad message id " + quote(line), fused: [] };
    }
    if (this.conn === null || this.conn.lost) {
      try {
        await this.reconnect();
      } catch (e) {
        const why = oneLine(reason(e));
        this.opts.log(`message ${id} not run: database connection lost, and connecting again failed: ${why}`);
        return { code: NOT_RUN, text: "database connection lost: " + why, fused: [] };
      }
    }
    for (let n = 1; ; n++) {
      const conn = this.conn;
      try {
        if (conn === null || conn.lost) {
          throw new Error("database connection lost");
        }
        return { code: 0, text: "", fused: await this.pass(conn, id, token, traceparent) };
      } catch (e) {
        const why = reason(e);
        if (conn === null || (await this.lost(conn, e))) {
          this.opts.log(`message ${id} not run: database connection lost: ${oneLine(why)}`);
          return { code: NOT_RUN, text: "database connection lost: " + why, fused: [] };
        }
        if (e instanceof HandlerError && this.abort.signal.aborted) {
          this.opts.log(`message ${id} left unanswered: told to stop, and the handler failed: ${oneLine(why)}`);
          return null;
        }
        if (transient(e) && n < MAX_PASSES) {
          this.opts.log(`message ${id}: ${oneLine(why)}; running it again`);
          continue;
        }
        this.opts.log(`message ${id} failed: ${oneLine(why)}`);
        return { code: 1, text: why, fused: [] };
      }
    }
  }

  /** Roll back what a failed pass left open, and say whether the
   * connection is lost. */
  private async lost(conn: Conn, err: unknown): Promise<boolean> {
    if (conn.lost || connectionError(err)) {
      conn.lost = true;
      return true;
    }
    if (conn.client.getTransactionStatus() !== "I") {
      try {
        await conn.client.query("ROLLBACK");
      } catch (e) {
        if (connectionError(e)) {
          conn.lost = true;
        }
      }
    }
    return conn.lost;
  }

  /** A pass: BEGIN and the read, the handler, then its queued statements,
   * the move and COMMIT. */
  private async pass(conn: Conn, id: bigint, token: bigint | null, traceparent: string | null): Promise<Fused[]> {
    const c = conn.client;
    const res = (await c.query(beginRead(id, token))) as unknown as QueryResult[];
    const row = res[1].rows[0] as ReadRow | undefined;
    if (row === undefined) {
      throw await explain(c, id);
    }
    if (row.status !== "running") {
      throw new PassError(`message ${id} is not running (it is ${row.status} at stage ${row.stage})`);
    }
    if (token !== null && row.pass !== String(token)) {
      throw new PassError(
        `message ${id} is not running pass ${token}: that pass is over (it runs pass ${row.pass} at stage ${row.stage})`,
      );
    }
    let open = true;
    const tx: Tx = {
      query: ((...args: unknown[]) => {
        if (!open) {
          throw new Error(`message ${id}: its pass is over: the transaction is no longer the handler's`);
        }
        return (c.query as (...a: unknown[]) => unknown).apply(c, args);
      }) as Tx["query"],
    };
    const m = new Message(
      {
        id,
        token,
        traceparent,
        stage: row.stage,
        attempts: row.attempts,
        createdAt: new Date(row.created_ms),
        headers: parseHeaders(row.headers),
        payload: row.payload === null ? Buffer.alloc(0) : Buffer.from(row.payload, "hex"),
      },
      tx,
      this.abort.signal,
    );
    let out: unknown;
    try {
      out = await this.handler(m, tx);
    } catch (e) {
      throw new HandlerError(e);
    } finally {
      open = false;
    }
    const bad = fusedError(m);
    if (bad !== null) {
      throw new PassError(bad);
    }
    const move = checkMove(out, m.stage);
    switch (c.getTransactionStatus()) {
      case "I":
        throw new PassError("the handler ended the pass's transaction (it is committed with the move)");
      case "E":
        throw new PassError("a statement of the pass failed (the handler caught its error): its transaction is aborted");
    }
    const done = (await c.query(moveCommit(move, id, token, m.queued))) as unknown as QueryResult[];
    if (done[done.length - 1].command !== "COMMIT") {
      throw new PassError("the transaction was rolled back at COMMIT");
    }
    return m.fusedStages;
  }
}

/** Why message id, which the read did not find, is not served. */
async function explain(c: Client, id: bigint): Promise<PassError> {
  const r = await c.query<{ status: string; stage: string }>(EXPLAIN, [id]);
  const row = r.rows[0];
  if (row === undefined || row.status === "running") {
    return new PassError(`message ${id} does not exist`);
  }
  return new PassError(`message ${id} is not running (it is ${row.status} at stage ${row.stage})`);
}

function parseHeaders(text: string | null): Record<string, unknown> {
  if (text === null) {
    return {};
  }
  const h: unknown = JSON.parse(text);
  return h !== null && typeof h === "object" && !Array.isArray(h) ? (h as Record<string, unknown>) : {};
}

function statusOf(a: Answer): string {
  return statusLine(a.code, a.text, a.fused);
}
