/**
 * @pepsi/stage/testing: run stage programs under a real pepsi dispatcher,
 * on a fresh database, for tests (as Go's pkg/worker/workertest and
 * Python's pepsi_stage.testing): the stages are real child processes
 * speaking the worker protocol, the database a real PostgreSQL.
 *
 *     const p = await Pipeline.create([
 *       { name: "parse", program: program("dist/stage.js", "--next", "deliver") },
 *       { name: "deliver", program: program("dist/stage.js") },
 *     ]);
 *     try {
 *       const ids = await p.enqueue("parse", "hello");
 *       await p.waitSettled(60);
 *       assert.equal((await p.row(ids[0])).status, "done");
 *       assert.deepEqual(await p.check(), []); // stops the dispatcher, checks the invariants
 *     } finally {
 *       await p.close();
 *     }
 *
 * The server is $PEPSI_TEST_DSN (default: the local one on its socket in
 * /var/run/postgresql); the pepsi binary is $PEPSI_BIN, else pepsi on PATH
 * (go build -o bin/pepsi ./cmd/pepsi in the pepsi sources).
 */
import { Client } from "pg";
/** The server when PEPSI_TEST_DSN is not set. */
export declare const DEFAULT_DSN = "postgres:///postgres?host=/var/run/postgresql";
/** The server tests create databases on: $PEPSI_TEST_DSN, else DEFAULT_DSN. */
export declare function serverDsn(): string;
/** The pepsi binary: $PEPSI_BIN, else pepsi on PATH; an Error if neither. */
export declare function pepsiBin(): string;
/** A PROGRAM that runs the JavaScript file script with args, with this
 * node (process.execPath). */
export declare function program(script: string, ...args: string[]): string;
/** The DSN of database name on the server of dsn. */
export declare function withDatabase(dsn: string, name: string): string;
/** One [stage-NAME] section; a limit left out takes pepsi's default. */
export interface Stage {
    name: string;
    program: string;
    parallelism?: number;
    queueLimit?: number;
    maxMessages?: number;
    /** Other keys of the section, as written. */
    settings?: Record<string, string>;
}
/** A message's queue row and headers. */
export interface Row {
    status: string;
    stage: string;
    error: string;
    dispatchError: string;
    attempts: number;
    headers: Record<string, unknown>;
}
/** A stage's statistics, summed (pepsi.stage_stats). */
export interface StageStats {
    processed: number;
    failed: number;
    timeouts: number;
    crashes: number;
    notRun: number;
    cancelled: number;
}
/** A database, its pepsi.conf and a `pepsi dispatch` running on them, until
 * close stops it and drops the database. */
export declare class Pipeline {
    readonly server: string;
    readonly name: string;
    readonly dir: string;
    readonly dsn: string;
    /** The test's own connection to the database, for fixtures and checks. */
    conn: Client;
    private proc;
    private exited;
    private readonly env;
    private constructor();
    /** The pepsi.conf written for the test. */
    get path(): string;
    /** The dispatcher's log file, the stage programs' stderr included. */
    get logPath(): string;
    /** Create a database on the server, migrate it, write a pepsi.conf with
     * the stages (and [pepsi-dispatch] settings that keep a test short: a
     * 5 s SHUTDOWN_GRACE, a 1 s SPAWN_COOLDOWN, then dispatch's) and start a
     * dispatcher on it. */
    static create(stages: readonly Stage[], dispatch?: Record<string, string>): Promise<Pipeline>;
    private writeConfig;
    /** Start the dispatcher (again, after stop). */
    start(): void;
    /** Whether the dispatcher this pipeline started has exited. */
    private get dead();
    /** Stop the dispatcher as SIGTERM does; its exit status (0 if it was not
     * running). */
    stop(timeoutSeconds?: number): Promise<number>;
    /** Stop the dispatcher, drop the database, remove the files. */
    close(): Promise<void>;
    /** The dispatcher's log, the stage programs' stderr included. */
    logs(): string;
    /** Put messages with these payloads (a string as UTF-8) into stage; their ids. */
    enqueue(stage: string, ...payloads: (Uint8Array | string)[]): Promise<bigint[]>;
    /** The first column of a query's first row (null without a row). */
    one(sql: string, params?: unknown[]): Promise<unknown>;
    /** Poll cond until it holds; an Error naming what after timeoutSeconds,
     * or as soon as the dispatcher has exited. */
    waitFor(what: string, timeoutSeconds: number, cond: () => boolean | Promise<boolean>): Promise<void>;
    /** Wait until every message is done, failed or cancelled. Both tables
     * are read in one statement, one snapshot: read apart, an admission
     * committing between the two reads would hide its messages from both. */
    waitSettled(timeoutSeconds?: number): Promise<void>;
    /** Message id's rows. */
    row(id: bigint): Promise<Row>;
    /** The stage's statistics, summed. */
    stageStats(stage: string): Promise<StageStats>;
    /** Stop the dispatcher and check what every run must keep (as Go's
     * testkit.CheckInvariants): it exited 0, no message is left running,
     * every message has a queue row, and the dispatcher's statistics agree
     * with the rows. The problems found. */
    check(): Promise<string[]>;
}
/** What runStage takes besides the script and payloads. */
export interface RunStageOptions {
    /** The script's arguments. */
    args?: string[];
    /** The stage's name; "test" by default. */
    stage?: string;
    /** Seconds to wait for the messages to settle; 120 by default. */
    timeout?: number;
}
/** Run the stage program script (a JavaScript file) as the one stage of a
 * pipeline, pass payloads through it, and return their rows once settled;
 * an Error if the run broke an invariant. */
export declare function runStage(script: string, payloads: readonly (Uint8Array | string)[], opts?: RunStageOptions): Promise<Row[]>;
