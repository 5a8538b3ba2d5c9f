// The worker protocol's lines (pepsi-worker(7)): id lines in, status lines out.

/** The hello line that asks the dispatcher for pass tokens (protocol 2). */
export const HELLO_TOKEN = "hello token";

/** The hello line that asks for pass tokens and trace contexts (protocol 3). */
export const HELLO_TRACE = "hello token trace";

/** The status (and exit status) that says the database, not the message, failed. */
export const NOT_RUN = 75;

const STAGE = /^[A-Za-z0-9_.-]{1,63}$/;
const INT = /^[+-]?[0-9]+$/;
const MAX_INT8 = (1n << 63n) - 1n;
const MAX_STATUS = 60000; // bytes of a status line, well within the dispatcher's 64 KiB

/** An id line: "ID", "ID TOKEN" or "ID TOKEN TRACEPARENT" (null for what
 * the line did not have). */
export interface IdLine {
  id: bigint;
  token: bigint | null;
  /** The W3C traceparent of the dispatcher's span of the pass. */
  traceparent: string | null;
}

/** Whether name is a stage name: 1 to 63 letters, digits, _ - or . */
export function checkStage(name: unknown): boolean {
  return typeof name === "string" && STAGE.test(name);
}

/** text quoted for a log or status line, at most 64 characters of it. */
export function quote(text: string): string {
  return JSON.stringify(text.slice(0, 64));
}

/** An id line's id, token and traceparent; an Error naming what is wrong
 * if it is bad. A traceparent, last on the line, is told from a token by
 * its dashes. */
export function parseIdLine(line: string): IdLine {
  const fields = line.trim().split(/\s+/).filter((f) => f !== "");
  let traceparent: string | null = null;
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
export function oneLine(text: string): string {
  return text.split(/\s+/).filter((w) => w !== "").join(" ");
}

/** A fused stage's report: the stage and the seconds its work took. */
export interface Fused {
  stage: string;
  seconds: number;
}

/** A status line: "CODE [STAGE=SECONDS ...] [# text]" and a newline. */
export function statusLine(code: number, text = "", fused: readonly Fused[] = []): string {
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
export function envProtocol(env: NodeJS.ProcessEnv = process.env): number {
  const v = env.PEPSI_PROTOCOL ?? "";
  return INT.test(v.trim()) ? Number(v) : 0;
}
