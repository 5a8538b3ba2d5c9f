"use strict";
// The loop that serves id lines with a handler, one transaction a pass.
Object.defineProperty(exports, "__esModule", { value: true });
exports.Runner = void 0;
const pg_1 = require("pg");
const config_1 = require("./config");
const message_1 = require("./message");
const moves_1 = require("./moves");
const protocol_1 = require("./protocol");
const sql_1 = require("./sql");
/** How often a message is tried when its pass hits a serialization
 * failure or deadlock. */
const MAX_PASSES = 3;
/** An error the handler threw (or its promise rejected with). */
class HandlerError extends Error {
    thrown;
    constructor(thrown) {
        super("the handler failed");
        this.thrown = thrown;
    }
}
/** Connects to the database of dsn. */
async function connect(dsn, appName, log) {
    const client = new pg_1.Client({ connectionString: (0, config_1.connectionString)(dsn), application_name: appName });
    const conn = { client, lost: false };
    // Without a listener an error on an idle connection would end the process.
    client.on("error", (err) => {
        if (!conn.lost) {
            log(`database connection lost: ${(0, protocol_1.oneLine)(err.message)}`);
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
function connectionError(err) {
    const e = (err instanceof HandlerError ? err.thrown : err);
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
function transient(err) {
    const e = (err instanceof HandlerError ? err.thrown : err);
    return e !== null && typeof e === "object" && (e.code === "40001" || e.code === "40P01");
}
/** The reason a failed pass gives: a refusal's or the database's message
 * as it is; what the handler threw as "Name: message". */
function reason(err) {
    if (err instanceof HandlerError) {
        const t = err.thrown;
        if (t instanceof pg_1.DatabaseError || t instanceof moves_1.PassError) {
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
class Runner {
    handler;
    lines;
    opts;
    conn = null;
    stopping = false;
    busy = false;
    abort = new AbortController();
    constructor(handler, lines, opts) {
        this.handler = handler;
        this.lines = lines;
        this.opts = opts;
    }
    /** Stop: at once when idle, else after the pass in hand. */
    stop() {
        this.stopping = true;
        this.abort.abort();
        if (!this.busy) {
            this.lines.interrupt();
        }
    }
    /** Connect, then serve until end of file or a stop (0), a connection
     * that cannot be made again (75), or a failure to read stdin or write
     * stdout (1). */
    async loop() {
        try {
            this.conn = await connect(this.opts.dsn, this.opts.appName, this.opts.log);
        }
        catch (e) {
            this.opts.log(`connect to database: ${(0, protocol_1.oneLine)(reason(e))}`);
            return protocol_1.NOT_RUN;
        }
        try {
            return await this.serveLines();
        }
        finally {
            await this.close();
        }
    }
    async serveLines() {
        for (;;) {
            if (this.stopping) {
                return 0;
            }
            let line;
            try {
                line = await this.lines.next();
            }
            catch (e) {
                this.opts.log(`reading message ids: ${reason(e)}`);
                return 1;
            }
            if (line === null) {
                return 0;
            }
            this.busy = true;
            let a;
            try {
                a = await this.serve(line);
            }
            finally {
                this.busy = false;
            }
            if (a === null) {
                return 0; // told to stop, the pass rolled back: unanswered, the dispatcher puts it back
            }
            try {
                await this.opts.write(statusOf(a));
            }
            catch (e) {
                if (this.stopping) {
                    return 0;
                }
                this.opts.log(`writing status lines: ${reason(e)}`);
                return 1;
            }
            if (a.code === protocol_1.NOT_RUN && !this.stopping) {
                try {
                    await this.reconnect();
                }
                catch (e) {
                    this.opts.log(`connect to database again: ${(0, protocol_1.oneLine)(reason(e))}`);
                    return protocol_1.NOT_RUN;
                }
            }
        }
    }
    async reconnect() {
        await this.close();
        this.conn = await connect(this.opts.dsn, this.opts.appName, this.opts.log);
    }
    async close() {
        const c = this.conn;
        this.conn = null;
        if (c === null) {
            return;
        }
        c.lost = true;
        // A dead connection may never say it has ended: wait a second at most.
        let timer;
        await Promise.race([
            c.client.end().catch(() => undefined),
            new Promise((resolve) => {
                timer = setTimeout(resolve, 1000);
            }),
        ]);
        clearTimeout(timer);
    }
    /** One id line's answer; null when the pass is to be left unanswered. */
    async serve(line) {
        let id, token, traceparent;
        try {
            ({ id, token, traceparent } = (0, protocol_1.parseIdLine)(line));
        }
        catch {
            this.opts.log(`bad message id on stdin: ${(0, protocol_1.quote)(line)}`);
            return { code: 1, text: "bad message id " + (0, protocol_1.quote)(line), fused: [] };
        }
        if (this.conn === null || this.conn.lost) {
            try {
                await this.reconnect();
            }
            catch (e) {
                const why = (0, protocol_1.oneLine)(reason(e));
                this.opts.log(`message ${id} not run: database connection lost, and connecting again failed: ${why}`);
                return { code: protocol_1.NOT_RUN, text: "database connection lost: " + why, fused: [] };
            }
        }
        for (let n = 1;; n++) {
            const conn = this.conn;
            try {
                if (conn === null || conn.lost) {
                    throw new Error("database connection lost");
                }
                return { code: 0, text: "", fused: await this.pass(conn, id, token, traceparent) };
            }
            catch (e) {
                const why = reason(e);
                if (conn === null || (await this.lost(conn, e))) {
                    this.opts.log(`message ${id} not run: database connection lost: ${(0, protocol_1.oneLine)(why)}`);
                    return { code: protocol_1.NOT_RUN, text: "database connection lost: " + why, fused: [] };
                }
                if (e instanceof HandlerError && this.abort.signal.aborted) {
                    this.opts.log(`message ${id} left unanswered: told to stop, and the handler failed: ${(0, protocol_1.oneLine)(why)}`);
                    return null;
                }
                if (transient(e) && n < MAX_PASSES) {
                    this.opts.log(`message ${id}: ${(0, protocol_1.oneLine)(why)}; running it again`);
                    continue;
                }
                this.opts.log(`message ${id} failed: ${(0, protocol_1.oneLine)(why)}`);
                return { code: 1, text: why, fused: [] };
            }
        }
    }
    /** Roll back what a failed pass left open, and say whether the
     * connection is lost. */
    async lost(conn, err) {
        if (conn.lost || connectionError(err)) {
            conn.lost = true;
            return true;
        }
        if (conn.client.getTransactionStatus() !== "I") {
            try {
                await conn.client.query("ROLLBACK");
            }
            catch (e) {
                if (connectionError(e)) {
                    conn.lost = true;
                }
            }
        }
        return conn.lost;
    }
    /** A pass: BEGIN and the read, the handler, then its queued statements,
     * the move and COMMIT. */
    async pass(conn, id, token, traceparent) {
        const c = conn.client;
        const res = (await c.query((0, sql_1.beginRead)(id, token)));
        const row = res[1].rows[0];
        if (row === undefined) {
            throw await explain(c, id);
        }
        if (row.status !== "running") {
            throw new moves_1.PassError(`message ${id} is not running (it is ${row.status} at stage ${row.stage})`);
        }
        if (token !== null && row.pass !== String(token)) {
            throw new moves_1.PassError(`message ${id} is not running pass ${token}: that pass is over (it runs pass ${row.pass} at stage ${row.stage})`);
        }
        let open = true;
        const tx = {
            query: ((...args) => {
                if (!open) {
                    throw new Error(`message ${id}: its pass is over: the transaction is no longer the handler's`);
                }
                return c.query.apply(c, args);
            }),
        };
        const m = new message_1.Message({
            id,
            token,
            traceparent,
            stage: row.stage,
            attempts: row.attempts,
            createdAt: new Date(row.created_ms),
            headers: parseHeaders(row.headers),
            payload: row.payload === null ? Buffer.alloc(0) : Buffer.from(row.payload, "hex"),
        }, tx, this.abort.signal);
        let out;
        try {
            out = await this.handler(m, tx);
        }
        catch (e) {
            throw new HandlerError(e);
        }
        finally {
            open = false;
        }
        const bad = (0, message_1.fusedError)(m);
        if (bad !== null) {
            throw new moves_1.PassError(bad);
        }
        const move = (0, moves_1.checkMove)(out, m.stage);
        switch (c.getTransactionStatus()) {
            case "I":
                throw new moves_1.PassError("the handler ended the pass's transaction (it is committed with the move)");
            case "E":
                throw new moves_1.PassError("a statement of the pass failed (the handler caught its error): its transaction is aborted");
        }
        const done = (await c.query((0, sql_1.moveCommit)(move, id, token, m.queued)));
        if (done[done.length - 1].command !== "COMMIT") {
            throw new moves_1.PassError("the transaction was rolled back at COMMIT");
        }
        return m.fusedStages;
    }
}
exports.Runner = Runner;
/** Why message id, which the read did not find, is not served. */
async function explain(c, id) {
    const r = await c.query(sql_1.EXPLAIN, [id]);
    const row = r.rows[0];
    if (row === undefined || row.status === "running") {
        return new moves_1.PassError(`message ${id} does not exist`);
    }
    return new moves_1.PassError(`message ${id} is not running (it is ${row.status} at stage ${row.stage})`);
}
function parseHeaders(text) {
    if (text === null) {
        return {};
    }
    const h = JSON.parse(text);
    return h !== null && typeof h === "object" && !Array.isArray(h) ? h : {};
}
function statusOf(a) {
    return (0, protocol_1.statusLine)(a.code, a.text, a.fused);
}
