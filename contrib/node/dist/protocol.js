"use strict";
// The worker protocol's lines (pepsi-worker(7)): id lines in, status lines out.
Object.defineProperty(exports, "__esModule", { value: true });
exports.NOT_RUN = exports.HELLO_TRACE = exports.HELLO_TOKEN = void 0;
exports.checkStage = checkStage;
exports.quote = quote;
exports.parseIdLine = parseIdLine;
exports.oneLine = oneLine;
exports.statusLine = statusLine;
exports.envProtocol = envProtocol;
/** The hello line that asks the dispatcher for pass tokens (protocol 2). */
exports.HELLO_TOKEN = "hello token";
/** The hello line that asks for pass tokens and trace contexts (protocol 3). */
exports.HELLO_TRACE = "hello token trace";
/** The status (and exit status) that says the database, not the message, failed. */
exports.NOT_RUN = 75;
const STAGE = /^[A-Za-z0-9_.-]{1,63}$/;
const INT = /^[+-]?[0-9]+$/;
const MAX_INT8 = (1n << 63n) - 1n;
const MAX_STATUS = 60000; // bytes of a status line, well within the dispatcher's 64 KiB
/** Whether name is a stage name: 1 to 63 letters, digits, _ - or . */
function checkStage(name) {
    return typeof name === "string" && STAGE.test(name);
}
/** text quoted for a log or status line, at most 64 characters of it. */
function quote(text) {
    return JSON.stringify(text.slice(0, 64));
}
/** An id line's id, token and traceparent; an Error naming what is wrong
 * if it is bad. A traceparent, last on the line, is told from a token by
 * its dashes. */
function parseIdLine(line) {
    const fields = line.trim().split(/\s+/).filter((f) => f !== "");
    let traceparent = null;
    if (fields.length > 1 && fields[fields.length - 1].indexOf("-") > 0) {
        traceparent = fields.pop() ?? null;
    }
    if (fields.length < 1 || fields.length > 2) {
        throw new Error(`id line ${quote(line)}: want ID or ID TOKEN`);
    }
    const nums = fields.map((f, i) => {
        const n = INT.test(f) ? BigInt(f) : 0n;
        if (n <= 0n || n > MAX_INT8) {
            throw new Error(`id line ${quote(line)}: bad ${i === 0 ? "message id" : "pass token"}`);
        }
        return n;
    });
    return { id: nums[0], token: nums.length === 2 ? nums[1] : null, traceparent };
}
/** text on one line: its blanks and newlines collapsed. */
function oneLine(text) {
    return text.split(/\s+/).filter((w) => w !== "").join(" ");
}
/** A status line: "CODE [STAGE=SECONDS ...] [# text]" and a newline. */
function statusLine(code, text = "", fused = []) {
    const parts = [String(code)];
    for (const f of fused) {
        parts.push(`${f.stage}=${Math.max(f.seconds, 0).toFixed(6)}`);
    }
    const t = oneLine(text);
    if (t !== "") {
        parts.push("# " + t);
    }
    let line = parts.join(" ").replaceAll("\0", " ");
    if (Buffer.byteLength(line) > MAX_STATUS) {
        line = Buffer.from(line).subarray(0, MAX_STATUS).toString("utf8");
    }
    return line + "\n";
}
/** The protocol version the dispatcher speaks ($PEPSI_PROTOCOL), 0 if none. */
function envProtocol(env = process.env) {
    const v = env.PEPSI_PROTOCOL ?? "";
    return INT.test(v.trim()) ? Number(v) : 0;
}
