import type { Readable } from "node:stream";
/** Reads lines from a stream; next() waits for the next one. A line
 * longer than 4096 bytes is handed out as "line too long". */
export declare class LineReader {
    private lines;
    private part;
    private skipping;
    private eof;
    private error;
    private wake;
    constructor(input: Readable);
    private add;
    private push;
    private end;
    private poke;
    /** The next line, null at end of file; rejects if the stream fails. */
    next(): Promise<string | null>;
    /** Stop a next() that is waiting: it returns null, as at end of file,
     * and so does every next() after it. */
    interrupt(): void;
}
