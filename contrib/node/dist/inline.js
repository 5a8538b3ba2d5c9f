"use strict";
// A statement with its values written in as literals, for the query string
// that carries the move: the simple protocol, which takes several
// statements in one round trip, binds no parameters.
Object.defineProperty(exports, "__esModule", { value: true });
exports.literal = literal;
exports.inline = inline;
const pg_1 = require("pg");
const utils_1 = require("pg/lib/utils");
const IDENT = /[A-Za-z0-9_$\u0080-\uffff]/;
const DOLLAR_TAG = /^\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/;
/** A value as an SQL literal, converted as pg converts a parameter: null
 * (or undefined) is NULL, bytes are bytea's hex form, the rest text that
 * the statement's context types as it would type the parameter. */
function literal(value, n) {
    const v = (0, utils_1.prepareValue)(value);
    if (v === null || v === undefined) {
        return "NULL";
    }
    const text = Buffer.isBuffer(v) ? "\\x" + v.toString("hex") : String(v);
    if (text.includes("\0")) {
        throw new Error(`value $${n} holds a NUL character, which no text value can`);
    }
    return (0, pg_1.escapeLiteral)(text);
}
/** text with each placeholder $N outside quotes and comments replaced by
 * values[N-1] as a literal; an Error names a placeholder without a value. */
function inline(text, values = []) {
    let out = "";
    let from = 0; // text[from:i] is copied as it is
    let i = 0;
    const n = text.length;
    while (i < n) {
        const c = text[i];
        const prev = i > 0 ? text[i - 1] : " ";
        if (c === "'") {
            const escapes = (prev === "E" || prev === "e") && (i < 2 || !IDENT.test(text[i - 2]));
            i = quoted(text, i + 1, "'", escapes);
        }
        else if (c === '"') {
            i = quoted(text, i + 1, '"', false);
        }
        else if (c === "-" && text[i + 1] === "-") {
            const end = text.indexOf("\n", i);
            i = end < 0 ? n : end + 1;
        }
        else if (c === "/" && text[i + 1] === "*") {
            i = comment(text, i);
        }
        else if (c === "$" && !IDENT.test(prev)) {
            const digits = /^\$([0-9]+)/.exec(text.slice(i, i + 12));
            if (digits !== null) {
                const k = Number(digits[1]);
                if (k < 1 || k > values.length) {
                    throw new Error(`$${digits[1]} has no value: ${values.length} given`);
                }
                out += text.slice(from, i) + literal(values[k - 1], k);
                i += digits[0].length;
                from = i;
                continue;
            }
            const tag = DOLLAR_TAG.exec(text.slice(i, i + 64));
            if (tag !== null) {
                const end = text.indexOf(tag[0], i + tag[0].length);
                i = end < 0 ? n : end + tag[0].length;
            }
            else {
                i++;
            }
        }
        else {
            i++;
        }
    }
    return out + text.slice(from);
}
/** The index after the closing quote of a quoted string or identifier
 * that starts at i; a doubled quote is one character of it, and so is a
 * backslash's next character in an E'' string. */
function quoted(text, i, q, escapes) {
    while (i < text.length) {
        const c = text[i];
        if (escapes && c === "\\") {
            i += 2;
        }
        else if (c === q) {
            if (text[i + 1] !== q) {
                return i + 1;
            }
            i += 2;
        }
        else {
            i++;
        }
    }
    return i;
}
/** The index after the block comment (nested, as PostgreSQL's) at i. */
function comment(text, i) {
    let depth = 0;
    while (i < text.length) {
        if (text.startsWith("/*", i)) {
            depth++;
            i += 2;
        }
        else if (text.startsWith("*/", i)) {
            depth--;
            i += 2;
            if (depth === 0) {
                return i;
            }
        }
        else {
            i++;
        }
    }
    return i;
}
