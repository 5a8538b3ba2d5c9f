"use strict";
/**
 * @pepsi/stage/testing: run stage programs under a real pepsi dispatcher,
 * on a fresh database, for tests (as Go's pkg/worker/workertest and
 * Python's pepsi_stage.testing): the stages are real child processes
 * speaking the worker protocol, the database a real PostgreSQL.
 *
 *     const p = await Pipeline.create([
 *       { name: "parse", program: program("dist/stage.js", "--next", "deliver") },
 *       { name: "deliver", program: program("dist/stage.js") },
 *     ]);
 *     try {
 *       const ids = await p.enqueue("parse", "hello");
 *       await p.waitSettled(60);
 *       assert.equal((await p.row(ids[0])).status, "done");
 *       assert.deepEqual(await p.check(), []); // stops the dispatcher, checks the invariants
 *     } finally {
 *       await p.close();
 *     }
 *
 * The server is $PEPSI_TEST_DSN (default: the local one on its socket in
 * /var/run/postgresql); the pepsi binary is $PEPSI_BIN, else pepsi on PATH
 * (go build -o bin/pepsi ./cmd/pepsi in the pepsi sources).
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Pipeline = exports.DEFAULT_DSN = void 0;
exports.serverDsn = serverDsn;
exports.pepsiBin = pepsiBin;
exports.program = program;
exports.withDatabase = withDatabase;
exports.runStage = runStage;
const node_child_process_1 = require("node:child_process");
const node_crypto_1 = require("node:crypto");
const node_fs_1 = require("node:fs");
const node_os_1 = require("node:os");
const node_path_1 = require("node:path");
const pg_1 = require("pg");
const config_1 = require("./config");
/** The server when PEPSI_TEST_DSN is not set. */
exports.DEFAULT_DSN = "postgres:///postgres?host=/var/run/postgresql";
/** The server tests create databases on: $PEPSI_TEST_DSN, else DEFAULT_DSN. */
function serverDsn() {
    return process.env.PEPSI_TEST_DSN || exports.DEFAULT_DSN;
}
/** The pepsi binary: $PEPSI_BIN, else pepsi on PATH; an Error if neither. */
function pepsiBin() {
    const env = process.env.PEPSI_BIN;
    if (env) {
        return env;
    }
    for (const dir of (process.env.PATH ?? "").split(node_path_1.delimiter)) {
        if (dir !== "" && (0, node_fs_1.existsSync)((0, node_path_1.join)(dir, "pepsi"))) {
            return (0, node_path_1.join)(dir, "pepsi");
        }
    }
    throw new Error("no pepsi binary: build it (go build -o bin/pepsi ./cmd/pepsi) and set PEPSI_BIN to it");
}
/** A PROGRAM that runs the JavaScript file script with args, with this
 * node (process.execPath). */
function program(script, ...args) {
    const words = [process.execPath, (0, node_path_1.resolve)(script), ...args];
    for (const w of words) {
        if (/[\s'"]/.test(w)) {
            throw new Error(`${JSON.stringify(w)}: a PROGRAM word with a blank or a quote`);
        }
    }
    return words.join(" ");
}
/** The DSN of database name on the server of dsn. */
function withDatabase(dsn, name) {
    const d = dsn.trim();
    if (/^postgres(ql)?:\/\//.test(d)) {
        const u = new URL(d);
        u.pathname = "/" + encodeURIComponent(name);
        return u.toString();
    }
    const kw = (0, config_1.parseKeywords)(d);
    kw.set("dbname", name);
    return [...kw].map(([k, v]) => `${k}='${v.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`).join(" ");
}
/** A database, its pepsi.conf and a `pepsi dispatch` running on them, until
 * close stops it and drops the database. */
class Pipeline {
    server;
    name;
    dir;
    dsn;
    /** The test's own connection to the database, for fixtures and checks. */
    conn;
    proc = null;
    exited = null;
    env;
    constructor(server, name, dir, dsn) {
        this.server = server;
        this.name = name;
        this.dir = dir;
        this.dsn = dsn;
        this.env = { ...process.env };
        delete this.env.PEPSI_DSN;
        delete this.env.PEPSI_CONFIG;
    }
    /** The pepsi.conf written for the test. */
    get path() {
        return (0, node_path_1.join)(this.dir, "pepsi.conf");
    }
    /** The dispatcher's log file, the stage programs' stderr included. */
    get logPath() {
        return (0, node_path_1.join)(this.dir, "dispatch.log");
    }
    /** Create a database on the server, migrate it, write a pepsi.conf with
     * the stages (and [pepsi-dispatch] settings that keep a test short: a
     * 5 s SHUTDOWN_GRACE, a 1 s SPAWN_COOLDOWN, then dispatch's) and start a
     * dispatcher on it. */
    static async create(stages, dispatch = {}) {
        const server = serverDsn();
        const name = "pepsi_test_node_" + (0, node_crypto_1.randomBytes)(6).toString("hex");
        const admin = new pg_1.Client({ connectionString: (0, config_1.connectionString)(server) });
        await admin.connect();
        try {
            await admin.query(`CREATE DATABASE "${name}"`);
        }
        finally {
            await admin.end();
        }
        const p = new Pipeline(server, name, (0, node_fs_1.mkdtempSync)((0, node_path_1.join)((0, node_os_1.tmpdir)(), "pepsi-stage-test-")), withDatabase(server, name));
        try {
            p.writeConfig(stages, { SHUTDOWN_GRACE: "5", SPAWN_COOLDOWN: "1", ...dispatch });
            const out = (0, node_child_process_1.spawnSync)(pepsiBin(), ["-c", p.path, "migrate"], { env: p.env, encoding: "utf8", timeout: 120_000 });
            if (out.status !== 0) {
                throw new Error(`pepsi migrate: exit ${out.status ?? out.signal ?? out.error}: ${out.stderr}`);
            }
            p.conn = new pg_1.Client({ connectionString: (0, config_1.connectionString)(p.dsn) });
            await p.conn.connect();
            p.start();
        }
        catch (e) {
            await p.close();
            throw e;
        }
        return p;
    }
    writeConfig(stages, dispatch) {
        if (this.dsn.includes('"')) {
            throw new Error(`${JSON.stringify(this.dsn)}: a DSN with a double quote`);
        }
        const lines = ["[database]", `DSN = "${this.dsn}"`, "", "[pepsi-dispatch]"];
        for (const [k, v] of Object.entries(dispatch)) {
            lines.push(`${k} = ${v}`);
        }
        for (const s of stages) {
            lines.push("", `[stage-${s.name}]`, `PROGRAM = ${s.program}`);
            for (const [key, n] of [
                ["PARALLELISM", s.parallelism],
                ["QUEUE_LIMIT", s.queueLimit],
                ["MAX_MESSAGES", s.maxMessages],
            ]) {
                if (n) {
                    lines.push(`${key} = ${n}`);
                }
            }
            for (const [k, v] of Object.entries(s.settings ?? {})) {
                lines.push(`${k} = ${v}`);
            }
        }
        (0, node_fs_1.writeFileSync)(this.path, lines.join("\n") + "\n");
    }
    /** Start the dispatcher (again, after stop). */
    start() {
        if (this.proc !== null) {
            throw new Error("the dispatcher is running");
        }
        const log = (0, node_fs_1.openSync)(this.logPath, "a");
        try {
            const proc = (0, node_child_process_1.spawn)(pepsiBin(), ["-c", this.path, "dispatch"], { env: this.env, stdio: ["ignore", log, log] });
            this.proc = proc;
            this.exited = new Promise((resolve) => {
                proc.on("exit", (code, signal) => resolve(code ?? (signal ? 128 : 1)));
                proc.on("error", () => resolve(127));
            });
        }
        finally {
            (0, node_fs_1.closeSync)(log);
        }
    }
    /** Whether the dispatcher this pipeline started has exited. */
    get dead() {
        return this.proc !== null && this.proc.exitCode !== null;
    }
    /** Stop the dispatcher as SIGTERM does; its exit status (0 if it was not
     * running). */
    async stop(timeoutSeconds = 60) {
        const proc = this.proc;
        const exited = this.exited;
        this.proc = null;
        this.exited = null;
        if (proc === null || exited === null) {
            return 0;
        }
        proc.kill("SIGTERM");
        let timer;
        const late = new Promise((resolve) => {
            timer = setTimeout(() => resolve(null), timeoutSeconds * 1000);
        });
        const code = await Promise.race([exited, late]);
        clearTimeout(timer);
        if (code === null) {
            proc.kill("SIGKILL");
            await exited;
            throw new Error(`the dispatcher did not stop within ${timeoutSeconds} s; log:\n${this.logs()}`);
        }
        return code;
    }
    /** Stop the dispatcher, drop the database, remove the files. */
    async close() {
        try {
            await this.stop();
        }
        finally {
            if (this.conn) {
                await this.conn.end().catch(() => undefined);
            }
            const admin = new pg_1.Client({ connectionString: (0, config_1.connectionString)(this.server) });
            await admin.connect();
            try {
                await admin.query(`DROP DATABASE IF EXISTS "${this.name}" WITH (FORCE)`);
            }
            finally {
                await admin.end();
            }
            (0, node_fs_1.rmSync)(this.dir, { recursive: true, force: true });
        }
    }
    /** The dispatcher's log, the stage programs' stderr included. */
    logs() {
        try {
            return (0, node_fs_1.readFileSync)(this.logPath, "utf8");
        }
        catch {
            return "";
        }
    }
    /** Put messages with these payloads (a string as UTF-8) into stage; their ids. */
    async enqueue(stage, ...payloads) {
        const ids = [];
        for (const p of payloads) {
            const b = typeof p === "string" ? Buffer.from(p, "utf8") : Buffer.from(p);
            const r = await this.conn.query("SELECT pepsi.enqueue($1, $2)::text AS id", [stage, b]);
            ids.push(BigInt(r.rows[0].id));
        }
        return ids;
    }
    /** The first column of a query's first row (null without a row). */
    async one(sql, params = []) {
        const r = await this.conn.query({ text: sql, values: params, rowMode: "array" });
        return r.rows.length === 0 ? null : r.rows[0][0];
    }
    /** Poll cond until it holds; an Error naming what after timeoutSeconds,
     * or as soon as the dispatcher has exited. */
    async waitFor(what, timeoutSeconds, cond) {
        const deadline = Date.now() + timeoutSeconds * 1000;
        while (!(await cond())) {
            if (Date.now() > deadline) {
                throw new Error(`${what}: not within ${timeoutSeconds} s; dispatcher log:\n${this.logs()}`);
            }
            if (this.dead) {
                throw new Error(`${what}: the dispatcher exited ${this.proc?.exitCode}; log:\n${this.logs()}`);
            }
            await new Promise((r) => setTimeout(r, 50));
        }
    }
    /** Wait until every message is done, failed or cancelled. Both tables
     * are read in one statement, one snapshot: read apart, an admission
     * committing between the two reads would hide its messages from both. */
    async waitSettled(timeoutSeconds = 120) {
        await this.waitFor("every message settled", timeoutSeconds, async () => Number(await this.one(`SELECT (SELECT count(*) FROM pepsi.state WHERE status NOT IN ('done', 'failed', 'cancelled'))
                               + (SELECT count(*) FROM pepsi.ingress)`)) === 0);
    }
    /** Message id's rows. */
    async row(id) {
        const r = await this.conn.query(`SELECT s.status, s.stage, coalesce(s.error, '') AS error, coalesce(s.dispatch_error, '') AS dispatch_error,
              s.attempts, m.headers::text AS headers
         FROM pepsi.state s JOIN pepsi.message m USING (id) WHERE s.id = $1`, [id]);
        const x = r.rows[0];
        if (x === undefined) {
            throw new Error(`message ${id}: no rows`);
        }
        return {
            status: x.status,
            stage: x.stage,
            error: x.error,
            dispatchError: x.dispatch_error,
            attempts: x.attempts,
            headers: JSON.parse(x.headers),
        };
    }
    /** The stage's statistics, summed. */
    async stageStats(stage) {
        const r = await this.conn.query({
            text: `SELECT coalesce(sum(processed), 0)::int8::text, coalesce(sum(failed), 0)::int8::text,
                    coalesce(sum(timeouts), 0)::int8::text, coalesce(sum(crashes), 0)::int8::text,
                    coalesce(sum(not_run), 0)::int8::text, coalesce(sum(cancelled), 0)::int8::text
               FROM pepsi.stage_stats WHERE stage = $1`,
            values: [stage],
            rowMode: "array",
        });
        const [processed, failed, timeouts, crashes, notRun, cancelled] = r.rows[0].map(Number);
        return { processed, failed, timeouts, crashes, notRun, cancelled };
    }
    /** Stop the dispatcher and check what every run must keep (as Go's
     * testkit.CheckInvariants): it exited 0, no message is left running,
     * every message has a queue row, and the dispatcher's statistics agree
     * with the rows. The problems found. */
    async check() {
        const bad = [];
        const code = await this.stop();
        if (code !== 0) {
            bad.push(`the dispatcher exited ${code}`);
        }
        const running = Number(await this.one("SELECT count(*) FROM pepsi.state WHERE status = 'running'"));
        if (running !== 0) {
            bad.push(`${running} messages left running`);
        }
        const orphans = Number(await this.one("SELECT count(*) FROM pepsi.message m LEFT JOIN pepsi.state s USING (id) WHERE s.id IS NULL"));
        if (orphans !== 0) {
            bad.push(`${orphans} messages without a state row`);
        }
        const g = await this.conn.query({
            text: `SELECT coalesce(sum(claimed), 0)::int8::text, coalesce(sum(done), 0)::int8::text,
                    coalesce(sum(failed), 0)::int8::text, coalesce(sum(join_failed), 0)::int8::text,
                    coalesce(sum(paused), 0)::int8::text, coalesce(sum(requeued), 0)::int8::text,
                    coalesce(sum(reset), 0)::int8::text, coalesce(sum(cancelled), 0)::int8::text
               FROM pepsi.dispatch_stats`,
            rowMode: "array",
        });
        const [claimed, done, failed, joinFailed, paused, requeued, reset, cancelled] = g.rows[0].map(Number);
        const rows = await this.conn.query({
            text: `SELECT count(*) FILTER (WHERE status = 'done')::text, count(*) FILTER (WHERE status = 'failed')::text
               FROM pepsi.state`,
            rowMode: "array",
        });
        const [rowsDone, rowsFailed] = rows.rows[0].map(Number);
        if (done !== rowsDone) {
            bad.push(`dispatch_stats.done = ${done}, rows done = ${rowsDone}`);
        }
        if (failed + joinFailed !== rowsFailed) {
            bad.push(`dispatch_stats.failed = ${failed} (+ join_failed ${joinFailed}), rows failed = ${rowsFailed}`);
        }
        if (claimed !== done + failed + paused + requeued + reset + cancelled) {
            bad.push(`claimed ${claimed} != done ${done} + failed ${failed} + paused ${paused}` +
                ` + requeued ${requeued} + reset ${reset} + cancelled ${cancelled}`);
        }
        return bad;
    }
}
exports.Pipeline = Pipeline;
/** Run the stage program script (a JavaScript file) as the one stage of a
 * pipeline, pass payloads through it, and return their rows once settled;
 * an Error if the run broke an invariant. */
async function runStage(script, payloads, opts = {}) {
    const stage = opts.stage ?? "test";
    const p = await Pipeline.create([{ name: stage, program: program(script, ...(opts.args ?? [])) }]);
    try {
        const ids = await p.enqueue(stage, ...payloads);
        await p.waitSettled(opts.timeout ?? 120);
        const rows = [];
        for (const id of ids) {
            rows.push(await p.row(id));
        }
        const bad = await p.check();
        if (bad.length > 0) {
            throw new Error(`${bad.join("; ")}\ndispatcher log:\n${p.logs()}`);
        }
        return rows;
    }
    finally {
        await p.close();
    }
}
