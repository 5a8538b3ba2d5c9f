"""The runner of a handler that is a plain function, on a psycopg2 connection."""

from __future__ import annotations

from typing import Awaitable, Callable

import psycopg2
import psycopg2.extensions as ext

from . import _message as msg
from ._acursor import AsyncCursor
from ._db import INTRANS, TRANSIENT, Cursor, behind_pooler, lost, one_line, rollback
from ._log import Log
from ._message import Message, Move, PassError
from ._protocol import NOT_RUN, LineReader, Writer, parse_id_line, quote, status_line, trace_of

Handler = Callable[[Message, Cursor], Move]
"""A stage: does the work for one message with the cursor, says its move."""

OneTripHandler = Callable[[Message], Move]
"""A one-trip stage: queues its work (Message.queue), says its move."""

AsyncHandler = Callable[[Message, AsyncCursor], Awaitable[Move]]
"""An async stage: does the work for one message with the cursor, says its move."""

MAX_PASSES = 3  # tries of a message whose pass hits a serialization failure or deadlock


class Passes:
    """The statements of a pass, shared by the plain and the async runner:
    the read, the end (queued statements, move, COMMIT, and the next
    message's BEGIN and read when its id has come), one string each, so
    that each is one round trip."""

    def __init__(self, conn: ext.connection, stage: str) -> None:
        self.conn, self.stage = conn, stage
        self.cur = conn.cursor()  # the package's own statements
        self.next: Message | None = None  # read in a transaction begun with the last COMMIT
        self.sql = msg.Statements(not behind_pooler(conn))
        if self.sql.prepared:
            try:
                self.cur.execute(self.sql.prepare())
            except psycopg2.ProgrammingError:  # a schema without one of them: each fails when sent
                self.sql = msg.Statements(False)

    def lost(self) -> bool:
        """Whether the connection is gone for good."""
        return lost(self.conn)

    def rollback(self) -> None:
        """End the transaction open on the connection, if any."""
        rollback(self.conn, self.cur)

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
        self.cur.execute(self.sql.begin_read(token), (mid,))
        if not msg.scan(m, self.cur.fetchone()):
            self.cur.execute(msg.EXPLAIN, (mid,))
            raise msg.explain(m, self.cur.fetchone())
        return m

    def check_open(self) -> None:
        """PassError if the handler ended the pass's transaction."""
        if self.conn.get_transaction_status() != INTRANS:
            raise PassError("the handler ended the pass's transaction (it is committed with the move)")

    def end(self, m: Message, move: Move, reader: LineReader) -> None:
        """Make the move and commit, in one round trip with m's queued
        statements and, when the next id line has come with a token, that
        message's BEGIN and read. An error raised is the pass's: the pass
        did not commit (it is rolled back)."""
        nxt = reader.peek() if m.token is not None else None
        if nxt is not None and nxt[1] is None:
            nxt = None  # a bare id's read locks: it is made in its own pass
        try:
            self.cur.execute(self.sql.end_pass(self.cur, m, move, nxt))
        except Exception as e:
            if nxt is not None and isinstance(e, psycopg2.Error) and not self.lost() and not self.still_open(m):
                return  # committed; the next read failed, and is made again when served
            self.rollback()
            raise
        if nxt is not None:
            n = Message(nxt[0], nxt[1], self.stage)
            try:
                if msg.scan(n, self.cur.fetchone()):
                    self.next = n
            except PassError:
                pass
        if self.next is None:
            self.rollback()

    def still_open(self, m: Message) -> bool:
        """After an error in a string that held COMMIT and the next read:
        whether m's pass is still open, that is the error came before COMMIT
        and nothing of the pass committed. The transaction is rolled back."""
        self.rollback()
        self.cur.execute(msg.OPEN, (m.token, m.id))
        row = self.cur.fetchone()
        return row is not None and row[0] is True

    def one_trip(self, m: Message, move: Move) -> None:
        """BEGIN, m's queued statements, the move and COMMIT in one round
        trip. The move's UPDATE locks the queue row and refuses a message no
        longer running (this pass), which rolls the work back with it."""
        try:
            self.cur.execute(b"BEGIN;\n" + self.sql.end_pass(self.cur, m, move, None))
        except Exception:
            self.rollback()
            raise


def answer(log: Log, mid: int, e: Exception, lost: bool, last: bool) -> tuple[int, str] | None:
    """The answer to a pass that raised e, None to run it again."""
    reason = str(e) or type(e).__name__
    if lost:
        log.error("message %d not run: database connection lost: %s", mid, one_line(e))
        return NOT_RUN, "database connection lost: " + reason
    if isinstance(e, TRANSIENT) and not last:
        log.warning("message %d: %s; running it again", mid, one_line(e))
        return None
    if not isinstance(e, (PassError, psycopg2.Error)):
        reason = f"{type(e).__name__}: {reason}"
    log.error("message %d failed: %s", mid, " ".join(reason.split()))
    return 1, reason


class SyncRunner:
    """Serves id lines with handler on conn, one transaction a pass."""

    def __init__(
        self,
        conn: ext.connection,
        handler: Handler | OneTripHandler,
        stage: str,
        log: Log,
        one_trip: bool = False,
    ) -> None:
        self.conn, self.handler, self.stage, self.log, self.one_trip = conn, handler, stage, log, one_trip
        self.passes = Passes(conn, stage)
        self.traceparent: str | None = None  # the id line's being served

    def loop(self, reader: LineReader, out: Writer) -> int:
        """Serve until end of file (0) or a lost connection (75)."""
        while True:
            line = reader.readline()
            if line is None:
                self.passes.drop_next()
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
                ans = answer(self.log, mid, e, self.passes.lost(), n == MAX_PASSES)
                if ans is not None:
                    return ans[0], ans[1], []
        raise AssertionError("unreachable")

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
        p = self.passes
        try:
            m = p.begin(mid, token)
            with self.conn.cursor() as cur:
                move = self.call(m, cur)
            p.check_open()
        except Exception:
            p.rollback()
            raise
        p.end(m, move, reader)
        return m.fused_stages

    def one_trip_pass(self, mid: int, token: int | None) -> list[tuple[str, float]]:
        """A one-trip pass: the handler first, then BEGIN, its queued
        statements, the move and COMMIT in one round trip."""
        m = Message(mid, token, self.stage)
        self.passes.one_trip(m, self.call(m, None))
        return m.fused_stages
