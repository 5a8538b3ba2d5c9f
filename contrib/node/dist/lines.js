"use strict";
// Id lines from a readable stream (stdin), one at a time.
Object.defineProperty(exports, "__esModule", { value: true });
exports.LineReader = void 0;
const MAX_LINE = 4096; // an id line has at most 40 characters
/** Reads lines from a stream; next() waits for the next one. A line
 * longer than 4096 bytes is handed out as "line too long". */
class LineReader {
    lines = [];
    part = ""; // the start of a line whose newline has not come
    skipping = false; // within a line too long, until its newline
    eof = false;
    error = null;
    wake = null;
    constructor(input) {
        input.setEncoding("latin1");
        input.on("data", (chunk) => {
            this.add(chunk);
            this.poke();
        });
        input.on("end", () => {
            this.end();
            this.poke();
        });
        input.on("error", (err) => {
            this.error = err;
            this.end();
            this.poke();
        });
    }
    add(chunk) {
        let rest = chunk;
        for (;;) {
            const i = rest.indexOf("\n");
            if (i < 0) {
                break;
            }
            this.push(this.part + rest.slice(0, i));
            this.part = "";
            rest = rest.slice(i + 1);
        }
        if (!this.skipping) {
            this.part += rest;
            if (this.part.length > MAX_LINE) {
                this.part = "";
                this.skipping = true;
            }
        }
    }
    push(line) {
        if (this.skipping || line.length > MAX_LINE) {
            this.skipping = false;
            this.lines.push("line too long");
            return;
        }
        this.lines.push(line.replace(/\r$/, ""));
    }
    end() {
        if (this.part !== "" || this.skipping) {
            this.push(this.part); // a last line without a newline counts
            this.part = "";
        }
        this.eof = true;
    }
    poke() {
        const w = this.wake;
        this.wake = null;
        w?.();
    }
    /** The next line, null at end of file; rejects if the stream fails. */
    async next() {
        for (;;) {
            const line = this.lines.shift();
            if (line !== undefined) {
                return line;
            }
            if (this.error) {
                throw this.error;
            }
            if (this.eof) {
                return null;
            }
            await new Promise((resolve) => {
                this.wake = resolve;
            });
        }
    }
    /** Stop a next() that is waiting: it returns null, as at end of file,
     * and so does every next() after it. */
    interrupt() {
        this.lines = [];
        this.eof = true;
        this.poke();
    }
}
exports.LineReader = LineReader;
