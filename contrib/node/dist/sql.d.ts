import type { Move } from "./moves";
/** The columns READ returns, all text but attempts and created_ms. */
export interface ReadRow {
    stage: string;
    status: string;
    attempts: number;
    pass: string | null;
    created_ms: number;
    headers: string | null;
    payload: string | null;
}
/** BEGIN and the read of message id, as one query string. A pass with a
 * token reads without a lock (the move's token is the fence); a bare id
 * locks its queue row, so that a settle of the pass (a timeout) waits for
 * the pass to end. */
export declare function beginRead(id: bigint, token: bigint | null): string;
/** Finds a message that is not in pepsi.state_live. */
export declare const EXPLAIN = "SELECT status, stage FROM pepsi.state WHERE id = $1::int8";
/** A statement queued with the move (Message.queue), its values written in. */
export interface Queued {
    text: string;
    values: readonly unknown[];
}
/** The statements queued with the move, then the SQL API call that makes
 * move for message id in the pass's transaction, presenting the pass's
 * token (NULL for a bare id), then COMMIT, as one query string. */
export declare function moveCommit(move: Move, id: bigint, token: bigint | null, queued?: readonly Queued[]): string;
