// The protocol's lines, the moves and the configuration, without a database.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { test } from "node:test";

import {
  ConfigError,
  MAX_RESULT,
  PassError,
  advance,
  checkMove,
  configArg,
  connectionString,
  defaultUser,
  fail,
  finish,
  iniDsn,
  join as joinAt,
  parseIdLine,
  pause,
  resolveDsn,
  statusLine,
} from "@pepsi/stage";
import { withDatabase } from "@pepsi/stage/testing";

import { LineReader } from "../src/lines";
import { inline } from "../src/inline";
import { moveCommit } from "../src/sql";

test("id lines", () => {
  const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  assert.deepEqual(parseIdLine("42"), { id: 42n, token: null, traceparent: null });
  assert.deepEqual(parseIdLine(" 42  9223372036854775807 "), { id: 42n, token: 9223372036854775807n, traceparent: null });
  assert.deepEqual(parseIdLine(`42 7 ${tp}`), { id: 42n, token: 7n, traceparent: tp });
  assert.deepEqual(parseIdLine(`42 ${tp}`), { id: 42n, token: null, traceparent: tp });
  for (const bad of ["", "0", "-1", "1 0", "1 2 3", "x", "1 y", "9223372036854775808", "1.5", tp, `1 2 3 ${tp}`]) {
    assert.throws(() => parseIdLine(bad), Error, bad);
  }
});

test("status lines", () => {
  assert.equal(statusLine(0), "0\n");
  assert.equal(statusLine(1, "bad\n  thing"), "1 # bad thing\n");
  assert.equal(statusLine(0, "", [{ stage: "geo", seconds: 0.5 }]), "0 geo=0.500000\n");
  assert.equal(statusLine(1, "a\0b"), "1 # a b\n");
});

test("line reader", async () => {
  const s = new PassThrough();
  const r = new LineReader(s);
  s.write("1 10\n2\r\n3");
  assert.equal(await r.next(), "1 10");
  assert.equal(await r.next(), "2");
  const third = r.next(); // "3" has no newline yet
  s.write("x".repeat(5000));
  s.write("y\n4\n");
  assert.equal(await third, "line too long");
  assert.equal(await r.next(), "4");
  s.end("5");
  assert.equal(await r.next(), "5"); // a last line without a newline counts
  assert.equal(await r.next(), null);
  const idle = new LineReader(new PassThrough());
  const waiting = idle.next();
  idle.interrupt();
  assert.equal(await waiting, null);
});

test("moves", () => {
  const big = finish(Buffer.alloc(MAX_RESULT + 1));
  for (const bad of [advance("here"), advance("no spaces"), pause(-1), pause(NaN), pause(Infinity), null, "done", {}, joinAt("a b"), big]) {
    assert.throws(() => checkMove(bad, "here"), PassError, JSON.stringify(bad));
  }
  assert.throws(() => checkMove(big, "here"), /^PassError: cannot finish with a result of 65537 bytes: at most 65536 \(64 KiB\)$/);
  for (const good of [advance("there"), finish(), pause(0), fail("why"), joinAt("here"), finish(Buffer.alloc(MAX_RESULT)), finish("r")]) {
    assert.equal(checkMove(good, "here"), good);
  }
  assert.deepEqual(finish("r1"), { kind: "finish", result: Buffer.from("r1") });
});

test("move statements", () => {
  assert.equal(moveCommit(finish(), 1n, 9n), "SELECT pepsi.finish(1::int8, 9::int8); COMMIT");
  assert.equal(moveCommit(advance("t"), 1n, null), "SELECT pepsi.advance(1::int8, 't'::text, NULL::int8); COMMIT");
  assert.equal(moveCommit(joinAt("j"), 1n, 9n), "SELECT pepsi.join(1::int8, 'j'::text, 9::int8); COMMIT");
  assert.equal(moveCommit(finish("r"), 1n, null), "SELECT pepsi.finish(1::int8, NULL::int8, decode('72', 'hex')); COMMIT");
  assert.equal(moveCommit(pause(0.2), 1n, null), "SELECT pepsi.pause(1::int8, make_interval(secs => 0.2::float8), NULL::int8); COMMIT");
  assert.equal(
    moveCommit(fail("it's a \\ and\0"), 1n, 9n),
    "SELECT pepsi.fail(1::int8,  E'it''s a \\\\ and\uFFFD'::text, 9::int8); COMMIT",
  );
});

test("statements queued with the move: values written in", () => {
  assert.equal(inline("SELECT $1, $2, $1", [1, "it's"]), "SELECT '1', 'it''s', '1'");
  assert.equal(inline("SELECT $1", [null]), "SELECT NULL");
  assert.equal(inline("SELECT $1", [undefined]), "SELECT NULL");
  assert.equal(inline("SELECT $1::bytea", [Buffer.from("ab")]), "SELECT  E'\\\\x6162'::bytea");
  assert.equal(inline("SELECT $1", [[1, "a", null]]), `SELECT '{"1","a",NULL}'`);
  assert.equal(inline("SELECT $1", [{ a: "b" }]), `SELECT '{"a":"b"}'`);
  assert.equal(inline("SELECT $1", [10n]), "SELECT '10'");
  assert.equal(inline("SELECT $1", ["a\\b"]), "SELECT  E'a\\\\b'");
  // Not placeholders: in quotes, identifiers, comments and dollar quotes.
  const asIs = [
    "SELECT '$1', 'it''s $1'",
    `SELECT "a$1", "x""$1"`,
    "SELECT E'\\'$1'",
    "SELECT a$1 FROM t$1",
    "SELECT 1 -- $1\n",
    "SELECT /* $1 /* $2 */ $3 */ 1",
    "SELECT $$ $1 $$, $q$ $2 $q$",
  ];
  for (const q of asIs) {
    assert.equal(inline(q, []), q, q);
  }
  assert.equal(inline("SELECT '$1', $1 -- $2\n, $2", [1, 2]), "SELECT '$1', '1' -- $2\n, '2'");
  assert.equal(inline("SELECT $tag$ $1 $tag$, $1", [5]), "SELECT $tag$ $1 $tag$, '5'");
  assert.throws(() => inline("SELECT $2", [1]), /\$2 has no value: 1 given/);
  assert.throws(() => inline("SELECT $1", ["a\0b"]), /value \$1 holds a NUL/);
  assert.equal(
    moveCommit(finish(), 1n, 9n, [{ text: "UPDATE t SET n = $1", values: [2] }]),
    "UPDATE t SET n = '2'\n;\nSELECT pepsi.finish(1::int8, 9::int8); COMMIT",
  );
});

test("configuration", () => {
  assert.equal(configArg(["--next", "x", "-c", "/etc/p.conf"]), "/etc/p.conf");
  assert.equal(configArg(["-c/a.conf"]), "/a.conf");
  assert.equal(configArg(["--c=/b.conf", "rest"]), "/b.conf");
  assert.equal(configArg(["--next", "x"]), "");
  assert.throws(() => configArg(["-c"]), ConfigError);
  assert.equal(iniDsn("[database]\nDSN = \"postgres:///x\"  \n"), "postgres:///x");
  assert.equal(iniDsn("[stage-a]\nDSN = no\n[database]\n  DSN = host=/run dbname=y ; a comment\n"), "host=/run dbname=y");
  assert.equal(iniDsn("[database]\nWORKER_DSN = x\n"), "");

  const dir = mkdtempSync(join(tmpdir(), "pepsi-stage-units-"));
  try {
    const conf = join(dir, "pepsi.conf");
    writeFileSync(conf, "[database]\nDSN = postgres:///fromfile\n");
    assert.equal(resolveDsn(conf, { PEPSI_DSN: "postgres:///env" }), "postgres:///env");
    assert.equal(resolveDsn(conf, {}), "postgres:///fromfile");
    assert.equal(resolveDsn("", { PEPSI_CONFIG: conf }), "postgres:///fromfile");
    assert.throws(() => resolveDsn(join(dir, "missing.conf"), {}), /missing\.conf: ENOENT/);
    writeFileSync(conf, "[database]\n");
    assert.throws(() => resolveDsn(conf, {}), /no database: set \[database\] DSN/);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("DSNs", () => {
  assert.equal(connectionString("postgres:///x?host=/run", null), "postgres:///x?host=/run");
  assert.equal(connectionString("postgres:///x?host=/run", "me"), "postgres:///x?host=/run&user=me");
  assert.equal(connectionString("postgres://u@h/x", "me"), "postgres://u@h/x");
  assert.equal(connectionString("postgresql://h/x", "me"), "postgresql://h/x?user=me");
  assert.equal(
    connectionString("host=/run/pg port=6432 dbname=my\\ db user=u password='a \\'b'", "me"),
    "postgresql:///my%20db?host=%2Frun%2Fpg&port=6432&user=u&password=a+%27b",
  );
  assert.equal(connectionString("host=/run dbname=x", "me"), "postgresql:///x?host=%2Frun&user=me");
  assert.equal(defaultUser({ PGUSER: "pg" }), null);
  assert.throws(() => connectionString("host=x target_session_attrs=any"), /keyword target_session_attrs is not supported/);
  assert.throws(() => connectionString("host"), /missing "=" after "host"/);
  assert.equal(withDatabase("postgres:///postgres?host=/run", "t1"), "postgres:///t1?host=/run");
  assert.equal(withDatabase("host=/run dbname=postgres", "t1"), "host='/run' dbname='t1'");
});
