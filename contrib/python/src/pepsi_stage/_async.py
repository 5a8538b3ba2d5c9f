"""The runner of an async def handler: the same passes as _sync's, the
handler awaited on an asyncio event loop, its statements run on the stage's
database thread (AsyncCursor)."""

from __future__ import annotations

import asyncio
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg2.extensions as ext

from . import _message as msg
from ._acursor import AsyncCursor
from ._db import keep_cancelling
from ._log import Log
from ._protocol import NOT_RUN, LineReader, Writer, parse_id_line, quote, status_line, trace_of
from ._sync import MAX_PASSES, AsyncHandler, Passes, answer

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

    def __init__(self, conn: ext.connection, handler: AsyncHandler, stage: str, log: Log, pool: ThreadPoolExecutor) -> None:
        self.conn, self.handler, self.stage, self.log, self.pool = conn, handler, stage, log, pool
        self.passes = Passes(conn, stage)
        self.traceparent: str | None = None  # the id line's being served

    async def loop(self, reader: LineReader, out: Writer) -> int:
        """Serve until end of file (0) or a lost connection (75)."""
        while True:
            line = await readline(reader)
            if line is None:
                self.passes.drop_next()
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
                ans = answer(self.log, mid, e, self.passes.lost(), n == MAX_PASSES)
                if ans is not None:
                    return ans[0], ans[1], []
        raise AssertionError("unreachable")

    async def pass_(self, mid: int, token: int | None, reader: LineReader) -> list[tuple[str, float]]:
        """A pass, as SyncRunner.pass_. The package's statements run on the
        database thread too, so that SIGTERM stops a pass waiting in one."""
        p = self.passes
        loop = asyncio.get_running_loop()
        try:
            m = await loop.run_in_executor(self.pool, p.begin, mid, token)
            m.traceparent = self.traceparent
            with self.conn.cursor() as cur:
                out: object = await self.handler(m, AsyncCursor(cur, self.pool))
            msg.check_fused(m)
            move = msg.check_move(out, m)
            p.check_open()
        except Exception:
            await loop.run_in_executor(self.pool, p.rollback)
            raise
        await loop.run_in_executor(self.pool, p.end, m, move, reader)
        return m.fused_stages


def serve(conn: ext.connection, handler: AsyncHandler, stage: str, log: Log, reader: LineReader, out: Writer) -> int:
    """Serve handler on an event loop until end of file or SIGTERM: the exit status."""
    return asyncio.run(_serve(conn, handler, stage, log, reader, out))


async def _serve(conn: ext.connection, handler: AsyncHandler, stage: str, log: Log, reader: LineReader, out: Writer) -> int:
    # SIGTERM cancels this task: whatever it awaits raises CancelledError.
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    pool = ThreadPoolExecutor(1, thread_name_prefix="pepsi-db")
    try:
        return await AsyncRunner(conn, handler, stage, log, pool).loop(reader, out)
    except asyncio.CancelledError:
        # The handler's statement, if one runs on the database thread: closing
        # the connection waits for it.
        threading.Thread(target=keep_cancelling, args=(conn,), name="pepsi-stop", daemon=True).start()
        return 0  # the message in hand is rolled back by the server, unanswered
    finally:
        pool.shutdown(wait=False)
