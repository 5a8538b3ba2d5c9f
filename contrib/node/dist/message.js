"use strict";
// The message a pass serves, and the graph calls it makes.
Object.defineProperty(exports, "__esModule", { value: true });
exports.Message = void 0;
exports.fusedError = fusedError;
const inline_1 = require("./inline");
const protocol_1 = require("./protocol");
// The SQL API's graph calls (sql/functions/30_graph.sql); a NULL token is
// a bare id's.
const SPAWN = "SELECT pepsi.spawn($1::int8, $2::text, $3::bytea, $4::jsonb, $5::int4, $6::text, $7::int8)::text AS n";
const SPAWN_MANY = "SELECT pepsi.spawn_many($1::int8, $2::text, $3::bytea[], $4::jsonb, $5::int4, $6::int8)::text AS n";
const CHILDREN = `SELECT id::text AS id, stage, status, error, encode(result, 'hex') AS result,
       (extract(epoch FROM updated_at) * 1000)::float8 AS updated_ms
  FROM pepsi.children($1::int8)`;
/** The message being served, read from its rows in the pass's
 * transaction. */
class Message {
    /** The message id. */
    id;
    /** The pass's token, null for a bare id (pepsi-worker(7), PASS TOKENS). */
    token;
    /** The W3C traceparent of the dispatcher's span of this pass, null when
     * it sent none (TRACING off, or $PEPSI_PROTOCOL below 3): start the
     * stage's own spans as its children. */
    traceparent;
    /** The stage it is running at. */
    stage;
    /** Passes at this stage, this one included (1 the first time). */
    attempts;
    /** When it entered the queue. */
    createdAt;
    /** pepsi.message.headers, a JSON object. */
    headers;
    /** pepsi.message.payload. */
    payload;
    /** Aborted when the program is told to stop (SIGTERM, SIGINT). The pass
     * in hand still commits when the handler returns a move; a handler that
     * would rather stop at once throws, and the pass is rolled back and left
     * unanswered, for the dispatcher to put back. */
    signal;
    /** The stages fused() reported. */
    fusedStages = [];
    /** The statements queue() added, in order. */
    queued = [];
    tx;
    constructor(f, tx, signal) {
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
    get attempt() {
        return this.attempts;
    }
    /** Report that this pass also did the work of stage, which took seconds:
     * the dispatcher books it to that stage's statistics. */
    fused(stage, seconds) {
        this.fusedStages.push({ stage, seconds });
    }
    /** Add a statement whose result the stage does not need to the pass's
     * transaction: it runs after the handler returns, in the order queued,
     * and goes out with the move and COMMIT in one round trip. Its values
     * ($1, $2, …) are written in as literals, converted as pg converts
     * parameters. An error in it fails the pass, rolled back whole. */
    queue(text, values = []) {
        (0, inline_1.inline)(text, values); // a placeholder without a value is the handler's error, thrown here
        this.queued.push({ text, values });
    }
    /** Make one child of the message, pending at stage, in the pass's
     * transaction, and return its id: the dispatcher sees it when the pass
     * commits, with the move (join, usually). The server refuses a message
     * not running (this pass), a key an unfinished message holds, and a child
     * more than pepsi.spawn_depth() (16) levels below the message first
     * enqueued. */
    async spawn(stage, payload = Buffer.alloc(0), opts = {}) {
        const args = [this.id, stage, bytes(payload), headers(opts), opts.priority ?? 0, opts.key || null, this.token];
        return BigInt(await this.one(SPAWN, args));
    }
    /** Make one child of the message per payload, all pending at stage with
     * the same headers and priority, in one statement, and return how many;
     * none makes none (a join then goes straight on). As spawn, with no key. */
    async spawnMany(stage, payloads, opts = {}) {
        if (opts.key) {
            throw new Error("spawnMany makes no child with a key: spawn a keyed child with spawn");
        }
        const args = [this.id, stage, payloads.map(bytes), headers(opts), opts.priority ?? 0, this.token];
        return Number(await this.one(SPAWN_MANY, args));
    }
    /** The message's children, in the order they were spawned, read in the
     * pass's transaction: what a join stage reads of its fan-out
     * (pepsi.children). */
    async children() {
        const r = await this.tx.query(CHILDREN, [this.id]);
        return r.rows.map((row) => ({
            id: BigInt(row.id),
            stage: row.stage,
            status: row.status,
            error: row.error ?? null,
            result: row.result === null ? null : Buffer.from(row.result, "hex"),
            updatedAt: new Date(row.updated_ms),
        }));
    }
    async one(sql, args) {
        const r = await this.tx.query(sql, args);
        return r.rows[0].n;
    }
}
exports.Message = Message;
function bytes(p) {
    return typeof p === "string" ? Buffer.from(p, "utf8") : Buffer.from(p);
}
function headers(opts) {
    return opts.headers && Object.keys(opts.headers).length > 0 ? JSON.stringify(opts.headers) : null;
}
/** Refuse a fused stage that is not a stage name; the error's message is
 * the reason. */
function fusedError(m) {
    for (const f of m.fusedStages) {
        if (!(0, protocol_1.checkStage)(f.stage)) {
            return `fused stage ${JSON.stringify(f.stage)} is not a stage name`;
        }
    }
    return null;
}
