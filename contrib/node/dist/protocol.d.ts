/** The hello line that asks the dispatcher for pass tokens (protocol 2). */
export declare const HELLO_TOKEN = "hello token";
/** The hello line that asks for pass tokens and trace contexts (protocol 3). */
export declare const HELLO_TRACE = "hello token trace";
/** The status (and exit status) that says the database, not the message, failed. */
export declare const NOT_RUN = 75;
/** An id line: "ID", "ID TOKEN" or "ID TOKEN TRACEPARENT" (null for what
 * the line did not have). */
export interface IdLine {
    id: bigint;
    token: bigint | null;
    /** The W3C traceparent of the dispatcher's span of the pass. */
    traceparent: string | null;
}
/** Whether name is a stage name: 1 to 63 letters, digits, _ - or . */
export declare function checkStage(name: unknown): boolean;
/** text quoted for a log or status line, at most 64 characters of it. */
export declare function quote(text: string): string;
/** An id line's id, token and traceparent; an Error naming what is wrong
 * if it is bad. A traceparent, last on the line, is told from a token by
 * its dashes. */
export declare function parseIdLine(line: string): IdLine;
/** text on one line: its blanks and newlines collapsed. */
export declare function oneLine(text: string): string;
/** A fused stage's report: the stage and the seconds its work took. */
export interface Fused {
    stage: string;
    seconds: number;
}
/** A status line: "CODE [STAGE=SECONDS ...] [# text]" and a newline. */
export declare function statusLine(code: number, text?: string, fused?: readonly Fused[]): string;
/** The protocol version the dispatcher speaks ($PEPSI_PROTOCOL), 0 if none. */
export declare function envProtocol(env?: NodeJS.ProcessEnv): number;
