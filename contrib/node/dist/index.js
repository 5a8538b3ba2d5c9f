"use strict";
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
Object.defineProperty(exports, "__esModule", { value: true });
exports.statusLine = exports.parseIdLine = exports.envProtocol = exports.checkStage = exports.NOT_RUN = exports.HELLO_TRACE = exports.HELLO_TOKEN = exports.pause = exports.join = exports.finish = exports.fail = exports.checkMove = exports.advance = exports.PassError = exports.MAX_RESULT = exports.Message = exports.resolveDsn = exports.parseKeywords = exports.iniDsn = exports.defaultUser = exports.connectionString = exports.configArg = exports.DEFAULT_PATH = exports.ConfigError = void 0;
exports.main = main;
exports.run = run;
const node_path_1 = require("node:path");
const node_fs_1 = require("node:fs");
const config_1 = require("./config");
const lines_1 = require("./lines");
const protocol_1 = require("./protocol");
const runner_1 = require("./runner");
var config_2 = require("./config");
Object.defineProperty(exports, "ConfigError", { enumerable: true, get: function () { return config_2.ConfigError; } });
Object.defineProperty(exports, "DEFAULT_PATH", { enumerable: true, get: function () { return config_2.DEFAULT_PATH; } });
Object.defineProperty(exports, "configArg", { enumerable: true, get: function () { return config_2.configArg; } });
Object.defineProperty(exports, "connectionString", { enumerable: true, get: function () { return config_2.connectionString; } });
Object.defineProperty(exports, "defaultUser", { enumerable: true, get: function () { return config_2.defaultUser; } });
Object.defineProperty(exports, "iniDsn", { enumerable: true, get: function () { return config_2.iniDsn; } });
Object.defineProperty(exports, "parseKeywords", { enumerable: true, get: function () { return config_2.parseKeywords; } });
Object.defineProperty(exports, "resolveDsn", { enumerable: true, get: function () { return config_2.resolveDsn; } });
var message_1 = require("./message");
Object.defineProperty(exports, "Message", { enumerable: true, get: function () { return message_1.Message; } });
var moves_1 = require("./moves");
Object.defineProperty(exports, "MAX_RESULT", { enumerable: true, get: function () { return moves_1.MAX_RESULT; } });
Object.defineProperty(exports, "PassError", { enumerable: true, get: function () { return moves_1.PassError; } });
Object.defineProperty(exports, "advance", { enumerable: true, get: function () { return moves_1.advance; } });
Object.defineProperty(exports, "checkMove", { enumerable: true, get: function () { return moves_1.checkMove; } });
Object.defineProperty(exports, "fail", { enumerable: true, get: function () { return moves_1.fail; } });
Object.defineProperty(exports, "finish", { enumerable: true, get: function () { return moves_1.finish; } });
Object.defineProperty(exports, "join", { enumerable: true, get: function () { return moves_1.join; } });
Object.defineProperty(exports, "pause", { enumerable: true, get: function () { return moves_1.pause; } });
var protocol_2 = require("./protocol");
Object.defineProperty(exports, "HELLO_TOKEN", { enumerable: true, get: function () { return protocol_2.HELLO_TOKEN; } });
Object.defineProperty(exports, "HELLO_TRACE", { enumerable: true, get: function () { return protocol_2.HELLO_TRACE; } });
Object.defineProperty(exports, "NOT_RUN", { enumerable: true, get: function () { return protocol_2.NOT_RUN; } });
Object.defineProperty(exports, "checkStage", { enumerable: true, get: function () { return protocol_2.checkStage; } });
Object.defineProperty(exports, "envProtocol", { enumerable: true, get: function () { return protocol_2.envProtocol; } });
Object.defineProperty(exports, "parseIdLine", { enumerable: true, get: function () { return protocol_2.parseIdLine; } });
Object.defineProperty(exports, "statusLine", { enumerable: true, get: function () { return protocol_2.statusLine; } });
/** A log line on stderr, written at once (as a dispatcher's log line). */
function logTo(name) {
    return (line) => {
        const text = `${name}: ${line}\n`;
        try {
            (0, node_fs_1.writeSync)(2, text);
        }
        catch {
            process.stderr.write(text); // EAGAIN on a full pipe: queue it instead
        }
    };
}
/** Status lines go to stdout through its write as the program found it,
 * each resolved once written; process.stdout.write itself (console.log,
 * say) goes to stderr from then on, so that a handler's output is a log
 * line, not a protocol error. */
function protocolWriter() {
    const out = process.stdout;
    const write = out.write.bind(out);
    out.on("error", () => undefined); // reported to write's callback
    out.write = process.stderr.write.bind(process.stderr);
    return (line) => new Promise((resolve, reject) => {
        write(line, (err) => (err ? reject(err) : resolve()));
    });
}
/** Serve handler on stdin and stdout as a stage program; resolve to the
 * exit status: 0 at end of file or after SIGTERM or SIGINT, 75 when the
 * database cannot be reached (at start, or again after a lost connection),
 * 1 when stdin or stdout breaks, 2 for a configuration error. */
async function main(handler, opts = {}) {
    const name = opts.name ?? (0, node_path_1.basename)(process.argv[1] ?? "pepsi-stage");
    const log = logTo(name);
    let dsn;
    try {
        dsn = (0, config_1.resolveDsn)((0, config_1.configArg)(opts.argv ?? process.argv.slice(2)));
        (0, config_1.connectionString)(dsn); // a DSN pg cannot take is a configuration error
    }
    catch (e) {
        if (e instanceof config_1.ConfigError) {
            log(e.message);
            return 2;
        }
        throw e;
    }
    const stage = process.env.PEPSI_STAGE ?? "";
    const write = protocolWriter();
    const lines = new lines_1.LineReader(process.stdin);
    const runner = new runner_1.Runner(handler, lines, { dsn, appName: "pepsi-worker " + (stage || name), write, log });
    const stop = () => runner.stop();
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    try {
        const protocol = (0, protocol_1.envProtocol)();
        if (protocol >= 2) {
            // First, before connecting: ids the dispatcher writes before it reads
            // the hello come without their tokens.
            try {
                await write((protocol >= 3 ? protocol_1.HELLO_TRACE : protocol_1.HELLO_TOKEN) + "\n");
            }
            catch (e) {
                log(`writing the hello line: ${(0, protocol_1.oneLine)(String(e))}`);
                return 1;
            }
        }
        return await runner.loop();
    }
    finally {
        process.off("SIGTERM", stop);
        process.off("SIGINT", stop);
    }
}
/** Serve handler as a stage program (see main) and exit with its status. */
function run(handler, opts = {}) {
    main(handler, opts).then((code) => process.exit(code), (err) => {
        logTo(opts.name ?? (0, node_path_1.basename)(process.argv[1] ?? "pepsi-stage"))(`internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
        process.exit(1);
    });
}
