// The message a pass serves, and the graph calls it makes.

import type { ClientBase, QueryResultRow } from "pg";

import { inline } from "./inline";
import { type Fused, checkStage } from "./protocol";
import type { Queued } from "./sql";

/** The pass's transaction: the client's query, which works only until the
 * handler's move is made (pg's ClientBase.query, every form of it). */
export interface Tx {
  query: ClientBase["query"];
}

/** A child's own headers, priority and deduplication key (spawn only). */
export interface SpawnOptions {
  /** The child's headers (a flow KEY at its stage reads them). */
  headers?: Record<string, string>;
  /** Lower is claimed first within its stage; 0 by default. */
  priority?: number;
  /** A deduplication key: no child while a message holding it is unfinished. */
  key?: string;
}

/** One child of a message, as its join stage reads it (pepsi.children). */
export interface Child {
  id: bigint;
  /** Where it is, or ended. */
  stage: string;
  /** pending, running, paused, held, waiting, done, failed or cancelled. */
  status: string;
  /** Why a failed or cancelled child ended so; null otherwise. */
  error: string | null;
  /** What its stage left with finish(result); null when none. */
  result: Buffer | null;
  /** Its last change. */
  updatedAt: Date;
}

/** What a Message was read from: its rows, as the pass's read found them. */
export interface MessageFields {
  id: bigint;
  token: bigint | null;
  traceparent: string | null;
  stage: string;
  attempts: number;
  createdAt: Date;
  headers: Record<string, unknown>;
  payload: Buffer;
}

// The SQL API's graph calls (sql/functions/30_graph.sql); a NULL token is
// a bare id's.
const SPAWN = "SELECT pepsi.spawn($1::int8, $2::text, $3::bytea, $4::jsonb, $5::int4, $6::text, $7::int8)::text AS n";
const SPAWN_MANY = "SELECT pepsi.spawn_many($1::int8, $2::text, $3::bytea[], $4::jsonb, $5::int4, $6::int8)::text AS n";
const CHILDREN = `SELECT id::text AS id, stage, status, error, encode(result, 'hex') AS result,
       (extract(epoch FROM updated_at) * 1000)::float8 AS updated_ms
  FROM pepsi.children($1::int8)`;

/** The message being served, read from its rows in the pass's
 * transaction. */
export class Message {
  /** The message id. */
  readonly id: bigint;
  /** The pass's token, null for a bare id (pepsi-worker(7), PASS TOKENS). */
  readonly token: bigint | null;
  /** The W3C traceparent of the dispatcher's span of this pass, null when
   * it sent none (TRACING off, or $PEPSI_PROTOCOL below 3): start the
   * stage's own spans as its children. */
  readonly traceparent: string | null;
  /** The stage it is running at. */
  readonly stage: string;
  /** Passes at this stage, this one included (1 the first time). */
  readonly attempts: number;
  /** When it entered the queue. */
  readonly createdAt: Date;
  /** pepsi.message.headers, a JSON object. */
  readonly headers: Record<string, unknown>;
  /** pepsi.message.payload. */
  readonly payload: Buffer;
  /** Aborted when the program is told to stop (SIGTERM, SIGINT). The pass
   * in hand still commits when the handler returns a move; a handler that
   * would rather stop at once throws, and the pass is rolled back and left
   * unanswered, for the dispatcher to put back. */
  readonly signal: AbortSignal;

  /** The stages fused() reported. */
  readonly fusedStages: Fused[] = [];
  /** The statements queue() added, in order. */
  readonly queued: Queued[] = [];
  private readonly tx: Tx;

  constructor(f: MessageFields, tx: Tx, signal: AbortSignal) {
    this.id = f.id;
    this.token = f.token;
    this.traceparent = f.traceparent;
    this.stage = f.stage;
    this.attempts = f.attempts;
    this.createdAt = f.createdAt;
    this.headers = f.headers;
    this.payload = f.payload;
    this.tx = tx;
    this.signal = signal;
  }

  /** The same as attempts. */
  get attempt(): number {
    return this.attempts;
  }

  /** Report that this pass also did the work of stage, which took seconds:
   * the dispatcher books it to that stage's statistics. */
  fused(stage: string, seconds: number): void {
    this.fusedStages.push({ stage, seconds });
  }

  /** Add a statement whose result the stage does not need to the pass's
   * transaction: it runs after the handler returns, in the order queued,
   * and goes out with the move and COMMIT in one round trip. Its values
   * ($1, $2, …) are written in as literals, converted as pg converts
   * parameters. An error in it fails the pass, rolled back whole. */
  queue(text: string, values: readonly unknown[] = []): void {
    inline(text, values); // a placeholder without a value is the handler's error, thrown here
    this.queued.push({ text, values });
  }

  /** Make one child of the message, pending at stage, in the pass's
   * transaction, and return its id: the dispatcher sees it when the pass
   * commits, with the move (join, usually). The server refuses a message
   * not running (this pass), a key an unfinished message holds, and a child
   * more than pepsi.spawn_depth() (16) levels below the message first
   * enqueued. */
  async spawn(stage: string, payload: Uint8Array | string = Buffer.alloc(0), opts: SpawnOptions = {}): Promise<bigint> {
    const args = [this.id, stage, bytes(payload), headers(opts), opts.priority ?? 0, opts.key || null, this.token];
    return BigInt(await this.one(SPAWN, args));
  }

  /** Make one child of the message per payload, all pending at stage with
   * the same headers and priority, in one statement, and return how many;
   * none makes none (a join then goes straight on). As spawn, with no key. */
  async spawnMany(stage: string, payloads: readonly (Uint8Array | string)[], opts: SpawnOptions = {}): Promise<number> {
    if (opts.key) {
      throw new Error("spawnMany makes no child with a key: spawn a keyed child with spawn");
    }
    const args = [this.id, stage, payloads.map(bytes), headers(opts), opts.priority ?? 0, this.token];
    return Number(await this.one(SPAWN_MANY, args));
  }

  /** The message's children, in the order they were spawned, read in the
   * pass's transaction: what a join stage reads of its fan-out
   * (pepsi.children). */
  async children(): Promise<Child[]> {
    const r = await this.tx.query<QueryResultRow>(CHILDREN, [this.id]);
    return r.rows.map((row) => ({
      id: BigInt(row.id as string),
      stage: row.stage as string,
      status: row.status as string,
      error: (row.error as string | null) ?? null,
      result: row.result === null ? null : Buffer.from(row.result as string, "hex"),
      updatedAt: new Date(row.updated_ms as number),
    }));
  }

  private async one(sql: string, args: unknown[]): Promise<string> {
    const r = await this.tx.query<QueryResultRow>(sql, args);
    return r.rows[0].n as string;
  }
}

function bytes(p: Uint8Array | string): Buffer {
  return typeof p === "string" ? Buffer.from(p, "utf8") : Buffer.from(p);
}

function headers(opts: SpawnOptions): string | null {
  return opts.headers && Object.keys(opts.headers).length > 0 ? JSON.stringify(opts.headers) : null;
}

/** Refuse a fused stage that is not a stage name; the error's message is
 * the reason. */
export function fusedError(m: Message): string | null {
  for (const f of m.fusedStages) {
    if (!checkStage(f.stage)) {
      return `fused stage ${JSON.stringify(f.stage)} is not a stage name`;
    }
  }
  return null;
}
