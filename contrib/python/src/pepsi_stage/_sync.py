"""The runner of a handler that is a plain function, on psycopg.Connection."""

from __future__ import annotations

import logging
from typing import Any, Callable

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from . import _message as msg
from ._message import Message, Move, PassError
from ._protocol import NOT_RUN, LineReader, Writer, parse_id_line, quote, status_line, trace_of

Cursor = psycopg.Cursor[TupleRow]
"""The cursor a handler does its work with, in the pass's transaction."""

Handler = Callable[[Message, Cursor], Move]
"""A stage: does the work for one message with the cursor, says its move."""

OneTripHandler = Callable[[Message], Move]
"""A one-trip stage: queues its work (Message.queue), says its move."""

MAX_PASSES = 3  # tries of a message whose pass hits a serialization failure or deadlock
TRANSIENT = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)


class ConnectionLost(Exception):
    """The database connection is gone: answered 75, and the program exits 75."""


def behind_pooler(conn: psycopg.Connection[Any]) -> bool:
    """Whether conn is not PostgreSQL's own session: the server process that
    runs its statements is not the one whose key it got at start-up (a
    pooler sends a key of its own). There statements must not be prepared."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is None or row[0] != conn.info.backend_pid


class SyncRunner:
    """Serves id lines with handler on conn, one transaction a pass."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        handler: Handler | OneTripHandler,
        stage: str,
        log: logging.Logger,
        one_trip: bool = False,
    ) -> None:
        self.conn, self.handler, self.stage, self.log, self.one_trip = conn, handler, stage, log, one_trip
        self.cur = conn.cursor()  # BEGIN, queued statements, moves
        self.commit_cur = conn.cursor()  # COMMIT, whose tag says whether it committed
        self.read_cur = conn.cursor(binary=True)  # the reads of messages
        self.next: Message | None = None  # read in a transaction begun with the last COMMIT
        self.traceparent: str | None = None  # the id line's being served

    def loop(self, reader: LineReader, out: Writer) -> int:
        """Serve until end of file (0) or a lost connection (75)."""
        while True:
            line = reader.readline()
            if line is None:
                self.drop_next()
                return 0
            code, text, fused = self.serve(line, reader)
            out.write(status_line(code, text, fused))
            if code == NOT_RUN:
                return NOT_RUN

    def serve(self, line: bytes, reader: LineReader) -> tuple[int, str, list[tuple[str, float]]]:
        """One id line's answer: code, reason, fused stages."""
        try:
            mid, token = parse_id_line(line)
            self.traceparent = trace_of(line)
        except ValueError:
            self.log.error("bad message id on stdin: %s", quote(line))
            return 1, "bad message id " + quote(line), []
        for n in range(1, MAX_PASSES + 1):
            try:
                if self.one_trip:
                    return 0, "", self.one_trip_pass(mid, token)
                return 0, "", self.pass_(mid, token, reader)
            except Exception as e:
                reason = str(e) or type(e).__name__
                if self.lost():
                    self.log.error("message %d not run: database connection lost: %s", mid, reason)
                    return NOT_RUN, "database connection lost: " + reason, []
                if isinstance(e, TRANSIENT) and n < MAX_PASSES:
                    self.log.warning("message %d: %s; running it again", mid, reason)
                    continue
                if not isinstance(e, (PassError, psycopg.Error)):
                    reason = f"{type(e).__name__}: {reason}"
                self.log.error("message %d failed: %s", mid, " ".join(reason.split()))
                return 1, reason, []
        raise AssertionError("unreachable")

    def lost(self) -> bool:
        """Whether the connection is gone for good."""
        return self.conn.closed or self.conn.broken

    def rollback(self) -> None:
        """End the transaction open on the connection, if any."""
        if self.lost() or self.conn.info.transaction_status == TransactionStatus.IDLE:
            return
        try:
            self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def drop_next(self) -> None:
        """Roll back the transaction begun for a message not served."""
        if self.next is not None:
            self.next = None
            self.rollback()

    def begin(self, mid: int, token: int | None) -> Message:
        """Open the pass's transaction and read its message, or take the one
        the last COMMIT opened for it."""
        m, self.next = self.next, None
        if m is not None and m.id == mid and m.token == token:
            return m
        self.rollback()
        m = Message(mid, token, self.stage)
        with self.conn.pipeline():
            self.cur.execute("BEGIN")
            self.read_cur.execute(msg.read_sql(token), (mid,))
        if not msg.scan(m, self.read_cur.fetchone()):
            raise msg.explain(m, self.cur.execute(msg.EXPLAIN, (mid,)).fetchone())
        return m

    def call(self, m: Message, cur: Cursor | None) -> Move:
        """Run the handler and check what it returns."""
        m.traceparent = self.traceparent
        if cur is None:
            out: object = self.handler(m)  # type: ignore[call-arg]
        else:
            out = self.handler(m, cur)  # type: ignore[call-arg]
        msg.check_fused(m)
        return msg.check_move(out, m)

    def pass_(self, mid: int, token: int | None, reader: LineReader) -> list[tuple[str, float]]:
        """A pass: the read, the handler, then its queued statements, the
        move and COMMIT in one round trip, with the next message's BEGIN and
        read when its id is there already."""
        committed = False
        try:
            m = self.begin(mid, token)
            with self.conn.cursor() as cur:
                move = self.call(m, cur)
            if self.conn.info.transaction_status != TransactionStatus.INTRANS:
                raise PassError("the handler ended the pass's transaction (it is committed with the move)")
            nxt = reader.peek()
            sql, args = msg.move_statement(move, m)
            sent = False  # COMMIT went out: commit_cur's tag is its, not the last pass's
            try:
                with self.conn.pipeline():
                    for q, p in m.queued:
                        self.cur.execute(q, p)
                    self.cur.execute(sql, args)
                    self.commit_cur.execute("COMMIT")
                    sent = True
                    if nxt is not None:
                        self.cur.execute("BEGIN")
                        self.read_cur.execute(msg.read_sql(nxt[1]), (nxt[0],))
            except psycopg.Error:
                if not sent or self.commit_cur.statusmessage != "COMMIT":
                    raise
                nxt = None  # the next read failed: it is read again when served
            if self.commit_cur.statusmessage != "COMMIT":
                raise PassError("the transaction was rolled back at COMMIT")
            committed = True
            if nxt is not None:
                n = Message(nxt[0], nxt[1], self.stage)
                try:
                    if msg.scan(n, self.read_cur.fetchone()):
                        self.next = n
                except PassError:
                    pass
            if self.next is None:
                self.rollback()
            return m.fused_stages
        except Exception:
            if not committed:
                self.rollback()
            raise

    def one_trip_pass(self, mid: int, token: int | None) -> list[tuple[str, float]]:
        """A one-trip pass: the handler first, then BEGIN, its queued
        statements, the move and COMMIT in one round trip. The move's UPDATE
        locks the queue row, and refuses a message no longer running (this
        pass), which rolls the work back with it."""
        m = Message(mid, token, self.stage)
        move = self.call(m, None)
        sql, args = msg.move_statement(move, m)
        try:
            with self.conn.pipeline():
                self.cur.execute("BEGIN")
                for q, p in m.queued:
                    self.cur.execute(q, p)
                self.cur.execute(sql, args)
                self.commit_cur.execute("COMMIT")
            if self.commit_cur.statusmessage != "COMMIT":
                raise PassError("the transaction was rolled back at COMMIT")
        except Exception:
            self.rollback()
            raise
        return m.fused_stages
