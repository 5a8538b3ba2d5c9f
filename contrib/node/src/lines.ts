// Id lines from a readable stream (stdin), one at a time.

import type { Readable } from "node:stream";

const MAX_LINE = 4096; // an id line has at most 40 characters

/** Reads lines from a stream; next() waits for the next one. A line
 * longer than 4096 bytes is handed out as "line too long". */
export class LineReader {
  private lines: string[] = [];
  private part = ""; // the start of a line whose newline has not come
  private skipping = false; // within a line too long, until its newline
  private eof = false;
  private error: Error | null = null;
  private wake: (() => void) | null = null;

  constructor(input: Readable) {
    input.setEncoding("latin1");
    input.on("data", (chunk: string) => {
      this.add(chunk);
      this.poke();
    });
    input.on("end", () => {
      this.end();
      this.poke();
    });
    input.on("error", (err: Error) => {
      this.error = err;
      this.end();
      this.poke();
    });
  }

  private add(chunk: string): void {
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

  private push(line: string): void {
    if (this.skipping || line.length > MAX_LINE) {
      this.skipping = false;
      this.lines.push("line too long");
      return;
    }
    this.lines.push(line.replace(/\r$/, ""));
  }

  private end(): void {
    if (this.part !== "" || this.skipping) {
      this.push(this.part); // a last line without a newline counts
      this.part = "";
    }
    this.eof = true;
  }

  private poke(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  /** The next line, null at end of file; rejects if the stream fails. */
  async next(): Promise<string | null> {
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
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  /** Stop a next() that is waiting: it returns null, as at end of file,
   * and so does every next() after it. */
  interrupt(): void {
    this.lines = [];
    this.eof = true;
    this.poke();
  }
}
