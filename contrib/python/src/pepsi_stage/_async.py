"""The runner of an async def handler, on psycopg.AsyncConnection: the same
passes as _sync's, each statement awaited."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from . import _message as msg
from ._message import Message, Move, PassError
from ._protocol import NOT_RUN, LineReader, Writer, parse_id_line, quote, status_line, trace_of
from ._sync import MAX_PASSES, TRANSIENT

AsyncCursor = psycopg.AsyncCursor[TupleRow]
"""The cursor an async handler does its work with, in the pass's transaction."""

AsyncHandler = Callable[[Message, AsyncCursor], Awaitable[Move]]
"""An async stage: does the work for one message with the cursor, says its move."""


async def behind_pooler(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether conn is not PostgreSQL's own session (see _sync.behind_pooler)."""
    row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
    return row is None or row[0] != conn.info.backend_pid


async def readline(reader: LineReader) -> bytes | None:
    """reader's next line, waiting for it on the event loop; None at EOF."""
    loop = asyncio.get_running_loop()
    while not reader.ready():
        if reader.eof:
            break
        ready = loop.create_future()
        try:
            loop.add_reader(reader.fd, ready.set_result, None)
        except (PermissionError, ValueError):  # a regular file: reading never waits
            return reader.readline()
        try:
            await ready
        finally:
            loop.remove_reader(reader.fd)
    return reader.readline()


class AsyncRunner:
    """Serves id lines with an async handler on conn, one transaction a pass."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], handler: AsyncHandler, stage: str, log: logging.Logger) -> None:
        self.conn, self.handler, self.stage, self.log = conn, handler, stage, log
        self.cur = conn.cursor()
        self.commit_cur = conn.cursor()
        self.read_cur = conn.cursor(binary=True)
        self.next: Message | None = None
        self.traceparent: str | None = None  # the id line's being served

    async def loop(self, reader: LineReader, out: Writer) -> int:
        """Serve until end of file (0) or a lost connection (75)."""
        while True:
            line = await readline(reader)
            if line is None:
                await self.drop_next()
                return 0
            code, text, fused = await self.serve(line, reader)
            out.write(status_line(code, text, fused))
            if code == NOT_RUN:
                return NOT_RUN

    async def serve(self, line: bytes, reader: LineReader) -> tuple[int, str, list[tuple[str, float]]]:
        """One id line's answer: code, reason, fused stages."""
        try:
            mid, token = parse_id_line(line)
            self.traceparent = trace_of(line)
        except ValueError:
            self.log.error("bad message id on stdin: %s", quote(line))
            return 1, "bad message id " + quote(line), []
        for n in range(1, MAX_PASSES + 1):
            try:
                return 0, "", await self.pass_(mid, token, reader)
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

    async def rollback(self) -> None:
        """End the transaction open on the connection, if any."""
        if self.lost() or self.conn.info.transaction_status == TransactionStatus.IDLE:
            return
        try:
            await self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    async def drop_next(self) -> None:
        """Roll back the transaction begun for a message not served."""
        if self.next is not None:
            self.next = None
            await self.rollback()

    async def begin(self, mid: int, token: int | None) -> Message:
        """Open the pass's transaction and read its message, or take the one
        the last COMMIT opened for it."""
        m, self.next = self.next, None
        if m is not None and m.id == mid and m.token == token:
            return m
        await self.rollback()
        m = Message(mid, token, self.stage)
        async with self.conn.pipeline():
            await self.cur.execute("BEGIN")
            await self.read_cur.execute(msg.read_sql(token), (mid,))
        if not msg.scan(m, await self.read_cur.fetchone()):
            raise msg.explain(m, await (await self.cur.execute(msg.EXPLAIN, (mid,))).fetchone())
        return m

    async def pass_(self, mid: int, token: int | None, reader: LineReader) -> list[tuple[str, float]]:
        """A pass, as SyncRunner.pass_."""
        committed = False
        try:
            m = await self.begin(mid, token)
            m.traceparent = self.traceparent
            async with self.conn.cursor() as cur:
                out: object = await self.handler(m, cur)
            msg.check_fused(m)
            move = msg.check_move(out, m)
            if self.conn.info.transaction_status != TransactionStatus.INTRANS:
                raise PassError("the handler ended the pass's transaction (it is committed with the move)")
            nxt = reader.peek()
            sql, args = msg.move_statement(move, m)
            sent = False
            try:
                async with self.conn.pipeline():
                    for q, p in m.queued:
                        await self.cur.execute(q, p)
                    await self.cur.execute(sql, args)
                    await self.commit_cur.execute("COMMIT")
                    sent = True
                    if nxt is not None:
                        await self.cur.execute("BEGIN")
                        await self.read_cur.execute(msg.read_sql(nxt[1]), (nxt[0],))
            except psycopg.Error:
                if not sent or self.commit_cur.statusmessage != "COMMIT":
                    raise
                nxt = None
            if self.commit_cur.statusmessage != "COMMIT":
                raise PassError("the transaction was rolled back at COMMIT")
            committed = True
            if nxt is not None:
                n = Message(nxt[0], nxt[1], self.stage)
                try:
                    if msg.scan(n, await self.read_cur.fetchone()):
                        self.next = n
                except PassError:
                    pass
            if self.next is None:
                await self.rollback()
            return m.fused_stages
        except Exception:
            if not committed:
                await self.rollback()
            raise
