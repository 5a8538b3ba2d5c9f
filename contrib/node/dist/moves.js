"use strict";
// The moves a handler returns: what becomes of its message.
Object.defineProperty(exports, "__esModule", { value: true });
exports.PassError = exports.MAX_RESULT = void 0;
exports.advance = advance;
exports.finish = finish;
exports.pause = pause;
exports.fail = fail;
exports.join = join;
exports.checkMove = checkMove;
const protocol_1 = require("./protocol");
/** The longest result finish may leave (pepsi.finish's p_result): 64 KiB. */
exports.MAX_RESULT = 64 << 10;
/** On to another stage; the dispatcher queues the message there. stage
 * must differ from the current one (to run it again here, pause it). */
function advance(stage) {
    return { kind: "advance", stage };
}
/** Done; with result (bytes, or a string as UTF-8, at most MAX_RESULT),
 * left for the join stage of the message's parent to read
 * (Message.children). */
function finish(result) {
    if (result === undefined || result === null) {
        return { kind: "finish", result: null };
    }
    const b = typeof result === "string" ? Buffer.from(result, "utf8") : Buffer.from(result);
    return { kind: "finish", result: b };
}
/** Paused: the dispatcher hands the message to this stage again once
 * seconds have passed. */
function pause(seconds) {
    return { kind: "pause", seconds };
}
/** Failed, a dead letter, with reason in its error column. The pass itself
 * succeeded: the answer is 0. */
function fail(reason) {
    return { kind: "fail", reason };
}
/** Waiting at stage until every child the message spawned (Message.spawn,
 * spawnMany) has ended; the dispatcher then queues it there (at once when
 * none is open). With JOIN_POLICY = fail, the default, a child that failed
 * fails it instead. stage may be the current one. */
function join(stage) {
    return { kind: "join", stage };
}
/** A pass that cannot go on: the message is not running (this pass), or
 * the handler broke the rules. Its message is the status line's reason. */
class PassError extends Error {
    name = "PassError";
}
exports.PassError = PassError;
/** move, if the handler returned a move that can be made for a message at
 * stage; PassError if not. */
function checkMove(move, stage) {
    const m = move;
    switch (m !== null && typeof m === "object" ? m.kind : undefined) {
        case "advance":
            if (!(0, protocol_1.checkStage)(m?.stage)) {
                throw new PassError(`cannot advance to ${JSON.stringify(m?.stage)}: not a stage name`);
            }
            if (m?.stage === stage) {
                throw new PassError(`cannot advance to ${stage}: the message is already there (to run it again, pause it)`);
            }
            return move;
        case "join":
            if (!(0, protocol_1.checkStage)(m?.stage)) {
                throw new PassError(`cannot join at ${JSON.stringify(m?.stage)}: not a stage name`);
            }
            return move;
        case "pause": {
            const s = m?.seconds;
            if (typeof s !== "number" || !(s >= 0) || !Number.isFinite(s)) {
                throw new PassError(`cannot pause for ${String(s)} s: not a non-negative number`);
            }
            return move;
        }
        case "finish": {
            const r = m?.result;
            if (r !== null && r !== undefined && !Buffer.isBuffer(r)) {
                throw new PassError("cannot finish with a result that is not a Buffer (use finish(result))");
            }
            if (Buffer.isBuffer(r) && r.length > exports.MAX_RESULT) {
                throw new PassError(`cannot finish with a result of ${r.length} bytes: at most ${exports.MAX_RESULT} (64 KiB)`);
            }
            return move;
        }
        case "fail":
            if (typeof m?.reason !== "string") {
                throw new PassError("cannot fail without a reason (a string)");
            }
            return move;
    }
    let what;
    try {
        what = JSON.stringify(move) ?? String(move);
    }
    catch {
        what = String(move);
    }
    throw new PassError(`the handler returned ${what.slice(0, 64)}, not a move (advance, finish, pause, fail or join)`);
}
