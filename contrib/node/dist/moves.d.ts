/** The longest result finish may leave (pepsi.finish's p_result): 64 KiB. */
export declare const MAX_RESULT: number;
/** What becomes of a message after a successful pass: build one with
 * advance, finish, pause, fail or join. */
export type Move = {
    readonly kind: "advance";
    readonly stage: string;
} | {
    readonly kind: "finish";
    readonly result: Buffer | null;
} | {
    readonly kind: "pause";
    readonly seconds: number;
} | {
    readonly kind: "fail";
    readonly reason: string;
} | {
    readonly kind: "join";
    readonly stage: string;
};
/** On to another stage; the dispatcher queues the message there. stage
 * must differ from the current one (to run it again here, pause it). */
export declare function advance(stage: string): Move;
/** Done; with result (bytes, or a string as UTF-8, at most MAX_RESULT),
 * left for the join stage of the message's parent to read
 * (Message.children). */
export declare function finish(result?: Uint8Array | string | null): Move;
/** Paused: the dispatcher hands the message to this stage again once
 * seconds have passed. */
export declare function pause(seconds: number): Move;
/** Failed, a dead letter, with reason in its error column. The pass itself
 * succeeded: the answer is 0. */
export declare function fail(reason: string): Move;
/** Waiting at stage until every child the message spawned (Message.spawn,
 * spawnMany) has ended; the dispatcher then queues it there (at once when
 * none is open). With JOIN_POLICY = fail, the default, a child that failed
 * fails it instead. stage may be the current one. */
export declare function join(stage: string): Move;
/** A pass that cannot go on: the message is not running (this pass), or
 * the handler broke the rules. Its message is the status line's reason. */
export declare class PassError extends Error {
    name: string;
}
/** move, if the handler returned a move that can be made for a message at
 * stage; PassError if not. */
export declare function checkMove(move: unknown, stage: string): Move;
