"""Run stage programs under a real pepsi dispatcher, on a fresh database,
for tests (as Go's pkg/worker/workertest): the stages are real child
processes speaking the worker protocol, the database a real PostgreSQL.

    with Pipeline([Stage("parse", program("stage.py", "--next", "deliver")),
                   Stage("deliver", program("stage.py"))]) as p:
        ids = p.enqueue("parse", b"hello")
        p.wait_settled(60)
        assert p.row(ids[0]).status == "done"
        assert p.check() == []  # stops the dispatcher, checks the invariants

The server is $PEPSI_TEST_DSN (default: the local one on its socket in
/var/run/postgresql); the pepsi binary is $PEPSI_BIN, else pepsi on PATH
(go build -o bin/pepsi ./cmd/pepsi in the pepsi sources).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import psycopg2
import psycopg2.extensions as ext
from psycopg2 import sql

from ._db import Params, Query, bytes_for_bytea

DEFAULT_DSN = "postgres:///postgres?host=/var/run/postgresql"
"""The server when PEPSI_TEST_DSN is not set."""


def server_dsn() -> str:
    """The server tests create databases on: $PEPSI_TEST_DSN, else DEFAULT_DSN."""
    return os.environ.get("PEPSI_TEST_DSN") or DEFAULT_DSN


def pepsi_bin() -> str:
    """The pepsi binary: $PEPSI_BIN, else pepsi on PATH; RuntimeError if neither."""
    path = os.environ.get("PEPSI_BIN") or shutil.which("pepsi")
    if not path:
        raise RuntimeError("no pepsi binary: build it (go build -o bin/pepsi ./cmd/pepsi) and set PEPSI_BIN to it")
    return path


def program(script: str, *args: str) -> str:
    """A PROGRAM that runs the Python file script, with this interpreter
    (sys.executable: the virtualenv the package is installed in)."""
    words = [sys.executable, os.path.abspath(script), *args]
    for w in words:
        if any(c.isspace() for c in w) or "'" in w or '"' in w:
            raise ValueError(f"{w!r}: a PROGRAM word with a blank or a quote")
    return " ".join(words)


@dataclass
class Stage:
    """One [stage-NAME] section; a zero limit takes pepsi's default."""

    name: str
    program: str
    parallelism: int = 0
    queue_limit: int = 0
    max_messages: int = 0
    settings: dict[str, str] = field(default_factory=dict)
    """Other keys of the section, as written."""


@dataclass
class Row:
    """A message's queue row and headers."""

    status: str
    stage: str
    error: str
    dispatch_error: str
    attempts: int
    headers: dict[str, Any]


class Pipeline:
    """A database, its pepsi.conf and a `pepsi dispatch` running on them,
    until close (or the end of a with block) stops it and drops the database."""

    def __init__(self, stages: list[Stage], dispatch: dict[str, str] | None = None) -> None:
        self.server = server_dsn()
        self.name = "pepsi_test_py_" + secrets.token_hex(6)
        self.dir = tempfile.mkdtemp(prefix="pepsi-stage-test-")
        self.path = os.path.join(self.dir, "pepsi.conf")
        self.log_path = os.path.join(self.dir, "dispatch.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {k: v for k, v in os.environ.items() if k not in ("PEPSI_DSN", "PEPSI_CONFIG")}
        _admin(self.server, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        self.dsn = ext.make_dsn(self.server, dbname=self.name)
        try:
            self._write_config(stages, {"SHUTDOWN_GRACE": "5", "SPAWN_COOLDOWN": "1", **(dispatch or {})})
            out = subprocess.run([pepsi_bin(), "-c", self.path, "migrate"], env=self.env, capture_output=True, timeout=120)
            if out.returncode != 0:
                raise RuntimeError(f"pepsi migrate: exit {out.returncode}: {out.stderr.decode(errors='replace')}")
            self.conn = psycopg2.connect(self.dsn)
            self.conn.autocommit = True
            bytes_for_bytea(self.conn)
            self.start()
        except BaseException:
            self.close()
            raise

    def _write_config(self, stages: list[Stage], dispatch: dict[str, str]) -> None:
        if '"' in self.dsn:
            raise ValueError(f"{self.dsn!r}: a DSN with a double quote")
        lines = ["[database]", f'DSN = "{self.dsn}"', "", "[pepsi-dispatch]"]
        lines += [f"{k} = {v}" for k, v in dispatch.items()]
        for s in stages:
            lines += ["", f"[stage-{s.name}]", f"PROGRAM = {s.program}"]
            for key, n in (("PARALLELISM", s.parallelism), ("QUEUE_LIMIT", s.queue_limit), ("MAX_MESSAGES", s.max_messages)):
                if n:
                    lines.append(f"{key} = {n}")
            lines += [f"{k} = {v}" for k, v in s.settings.items()]
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the dispatcher (again, after stop)."""
        if self.proc is not None:
            raise RuntimeError("the dispatcher is running")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [pepsi_bin(), "-c", self.path, "dispatch"], env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )

    def stop(self, timeout: float = 60) -> int:
        """Stop the dispatcher as SIGTERM does; its exit status (0 if it was not running)."""
        p, self.proc = self.proc, None
        if p is None:
            return 0
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise RuntimeError(f"the dispatcher did not stop within {timeout} s; log:\n{self.logs()}") from None

    def close(self) -> None:
        """Stop the dispatcher, drop the database, remove the files."""
        try:
            if self.proc is not None:
                self.stop()
        finally:
            if getattr(self, "conn", None) is not None:
                self.conn.close()
            _admin(self.server, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name)))
            shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        """The dispatcher's log, the stage programs' stderr included."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def enqueue(self, stage: str, *payloads: bytes) -> list[int]:
        """Put messages with these payloads into stage; their ids."""
        ids = []
        for p in payloads:
            row = self.execute("SELECT pepsi.enqueue(%s, %s)", (stage, p)).fetchone()
            assert row is not None
            ids.append(int(row[0]))
        return ids

    def execute(self, query: Query, params: Params | None = None) -> ext.cursor:
        """Run a statement on the test's connection (autocommit); the cursor
        with its result."""
        cur = self.conn.cursor()
        cur.execute(query, params)
        return cur

    def one(self, query: Query, params: Params | None = None) -> Any:
        """The first column of a query's one row (None without a row)."""
        row = self.execute(query, params).fetchone()
        return None if row is None else row[0]

    def wait_for(self, what: str, timeout: float, cond: Callable[[], bool]) -> None:
        """Poll cond until it holds; TimeoutError naming what after timeout seconds."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout} s; dispatcher log:\n{self.logs()}")
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{what}: the dispatcher exited {self.proc.returncode}; log:\n{self.logs()}")
            time.sleep(0.05)

    def wait_settled(self, timeout: float = 120) -> None:
        """Wait until every message is done, failed or cancelled. Both
        tables are read in one statement, one snapshot: read apart, an
        admission committing between the two reads (pepsi.ingress to
        pepsi.state) would hide its messages from both."""
        self.wait_for(
            "every message settled",
            timeout,
            lambda: bool(
                self.one(
                    """SELECT (SELECT count(*) FROM pepsi.state WHERE status NOT IN ('done', 'failed', 'cancelled'))
                            + (SELECT count(*) FROM pepsi.ingress)"""
                )
                == 0
            ),
        )

    def row(self, mid: int) -> Row:
        """Message mid's rows."""
        r = self.execute(
            """SELECT s.status, s.stage, coalesce(s.error, ''), coalesce(s.dispatch_error, ''), s.attempts, m.headers
                 FROM pepsi.state s JOIN pepsi.message m USING (id) WHERE s.id = %s""",
            (mid,),
        ).fetchone()
        if r is None:
            raise KeyError(f"message {mid}: no rows")
        return Row(*r)

    def stage_stats(self, stage: str) -> dict[str, float]:
        """The stage's statistics summed: processed, failed, timeouts, crashes, not_run, cancelled."""
        cur = self.execute(
            """SELECT coalesce(sum(processed), 0), coalesce(sum(failed), 0), coalesce(sum(timeouts), 0),
                      coalesce(sum(crashes), 0), coalesce(sum(not_run), 0), coalesce(sum(cancelled), 0)
                 FROM pepsi.stage_stats WHERE stage = %s""",
            (stage,),
        )
        r = cur.fetchone()
        assert r is not None
        return dict(zip(("processed", "failed", "timeouts", "crashes", "not_run", "cancelled"), map(float, r)))

    def check(self) -> list[str]:
        """Stop the dispatcher and check what every run must keep: it exited
        0, no message is left running, every message has a queue row, and
        the dispatcher's statistics agree with the rows. The problems found."""
        bad = []
        if (code := self.stop()) != 0:
            bad.append(f"the dispatcher exited {code}")
        if n := self.one("SELECT count(*) FROM pepsi.state WHERE status = 'running'"):
            bad.append(f"{n} messages left running")
        if n := self.one("SELECT count(*) FROM pepsi.message m LEFT JOIN pepsi.state s USING (id) WHERE s.id IS NULL"):
            bad.append(f"{n} messages without a state row")
        r = self.execute(
            """SELECT coalesce(sum(claimed), 0), coalesce(sum(done), 0), coalesce(sum(failed), 0), coalesce(sum(paused), 0),
                      coalesce(sum(requeued), 0), coalesce(sum(reset), 0), coalesce(sum(cancelled), 0),
                      coalesce(sum(join_failed), 0)
                 FROM pepsi.dispatch_stats"""
        ).fetchone()
        assert r is not None
        claimed, done, failed, paused, requeued, reset, cancelled, join_failed = r
        rows = self.execute(
            "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed') FROM pepsi.state"
        ).fetchone()
        assert rows is not None
        if done != rows[0]:
            bad.append(f"dispatch_stats.done = {done}, rows done = {rows[0]}")
        if failed + join_failed != rows[1]:  # join_failed: failed at a join, by no pass
            bad.append(f"dispatch_stats.failed = {failed} (+ join_failed {join_failed}), rows failed = {rows[1]}")
        if claimed != done + failed + paused + requeued + reset + cancelled:
            bad.append(
                f"claimed {claimed} != done {done} + failed {failed} + paused {paused}"
                f" + requeued {requeued} + reset {reset} + cancelled {cancelled}"
            )
        return bad


def _admin(server: str, stmt: sql.Composable) -> None:
    """Run stmt on the server's own database, outside a transaction."""
    c = psycopg2.connect(server)
    try:
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute(stmt)
    finally:
        c.close()


def run_stage(script: str, payloads: list[bytes], *args: str, stage: str = "test", timeout: float = 120) -> list[Row]:
    """Run the stage program script (a Python file, with args) as the one
    stage of a pipeline, pass payloads through it, and return their rows
    once settled; AssertionError if the run broke an invariant."""
    with Pipeline([Stage(stage, program(script, *args))]) as p:
        ids = p.enqueue(stage, *payloads)
        p.wait_settled(timeout)
        rows = [p.row(i) for i in ids]
        bad = p.check()
        if bad:
            raise AssertionError("; ".join(bad) + "\ndispatcher log:\n" + p.logs())
        return rows
