"use strict";
// The statements of a pass: the read of its message and its move. The
// read goes out with BEGIN, the move with COMMIT, each pair as one
// simple-protocol query string (one round trip), and so with its values
// written in as literals: ids and tokens are numbers the kit parsed, stage
// names are checked, and text and bytes are quoted here.
Object.defineProperty(exports, "__esModule", { value: true });
exports.EXPLAIN = void 0;
exports.beginRead = beginRead;
exports.moveCommit = moveCommit;
const pg_1 = require("pg");
const inline_1 = require("./inline");
// The read of a message, as pkg/worker's: its queue row among the
// unfinished ones (pepsi.state_live) and its message row through
// pepsi.message_row, whose plan is kept. Numbers and bytes come as text
// whatever type parsers the program has set in pg (a token is an int8
// beyond a JavaScript number).
const READ = `SELECT s.stage, s.status, s.attempts, s.pass::text AS pass,
       (extract(epoch FROM m.created_at) * 1000)::float8 AS created_ms,
       m.headers::text AS headers, encode(m.payload, 'hex') AS payload
  FROM pepsi.state_live s, pepsi.message_row(s.id) m
 WHERE s.id = `;
/** BEGIN and the read of message id, as one query string. A pass with a
 * token reads without a lock (the move's token is the fence); a bare id
 * locks its queue row, so that a settle of the pass (a timeout) waits for
 * the pass to end. */
function beginRead(id, token) {
    return `BEGIN; ${READ}${id}::int8${token === null ? " FOR UPDATE OF s" : ""}`;
}
/** Finds a message that is not in pepsi.state_live. */
exports.EXPLAIN = "SELECT status, stage FROM pepsi.state WHERE id = $1::int8";
function int8(n) {
    return n === null ? "NULL::int8" : `${n}::int8`;
}
function text(s) {
    // A NUL cannot be in a query string, nor in a text value.
    return (0, pg_1.escapeLiteral)(s.replaceAll("\0", "\uFFFD")) + "::text";
}
function bytea(b) {
    return `decode('${b.toString("hex")}', 'hex')`;
}
/** The statements queued with the move, then the SQL API call that makes
 * move for message id in the pass's transaction, presenting the pass's
 * token (NULL for a bare id), then COMMIT, as one query string. */
function moveCommit(move, id, token, queued = []) {
    let q = "";
    for (const s of queued) {
        q += (0, inline_1.inline)(s.text, s.values) + "\n;\n"; // on a line of its own: a -- comment ends there
    }
    return `${q}SELECT ${call(move, id, token)}; COMMIT`;
}
function call(move, id, token) {
    switch (move.kind) {
        case "advance":
            return `pepsi.advance(${int8(id)}, ${text(move.stage)}, ${int8(token)})`;
        case "finish":
            return move.result === null
                ? `pepsi.finish(${int8(id)}, ${int8(token)})`
                : `pepsi.finish(${int8(id)}, ${int8(token)}, ${bytea(move.result)})`;
        case "pause":
            return `pepsi.pause(${int8(id)}, make_interval(secs => ${move.seconds}::float8), ${int8(token)})`;
        case "fail":
            return `pepsi.fail(${int8(id)}, ${text(move.reason)}, ${int8(token)})`;
        case "join":
            return `pepsi.join(${int8(id)}, ${text(move.stage)}, ${int8(token)})`;
    }
}
