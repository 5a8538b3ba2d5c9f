"""The cursor an async def handler gets: psycopg2's, its statements run on
the stage's database thread and awaited, so that the event loop goes on
meanwhile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence, cast

import psycopg2.extensions as ext

from ._db import Params, Query, mogrify

if TYPE_CHECKING:  # not imported by a stage that is not async: its start-up is shorter
    from concurrent.futures import ThreadPoolExecutor


class AsyncCursor:
    """A cursor in the pass's transaction for an async def handler: as
    psycopg2's cursor, with execute, executemany and the fetches awaited
    (execute returns the cursor, so await cur.execute(...) can be followed
    by await cur.fetchone())."""

    def __init__(self, cur: ext.cursor, pool: ThreadPoolExecutor) -> None:
        self.cursor = cur
        """The psycopg2 cursor underneath, for what this one does not wrap."""
        self._pool = pool

    async def _run(self, fn: Any, *args: Any) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def execute(self, query: Query, params: Params | None = None) -> AsyncCursor:
        """Run a statement; its rows are fetched with the fetch methods."""
        await self._run(self.cursor.execute, query, params)
        return self

    async def executemany(self, query: Query, params_seq: Iterable[Params]) -> None:
        """Run a statement once for each set of parameters."""
        await self._run(self.cursor.executemany, query, list(params_seq))

    async def fetchone(self) -> tuple[Any, ...] | None:
        """The next row of the last statement's result, None after the last."""
        return self.cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        """The next size rows (cursor.arraysize by default)."""
        return self.cursor.fetchmany(self.cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[tuple[Any, ...]]:
        """The remaining rows."""
        return self.cursor.fetchall()

    def mogrify(self, query: Query, params: Params | None = None) -> bytes:
        """The statement as it would be sent, with its parameters in it."""
        return mogrify(self.cursor, query, params)

    def sibling(self) -> AsyncCursor:
        """Another cursor on the same connection, in the same transaction."""
        return AsyncCursor(self.cursor.connection.cursor(), self._pool)

    @property
    def rowcount(self) -> int:
        """Rows the last statement returned or changed, -1 if not known."""
        return self.cursor.rowcount

    @property
    def statusmessage(self) -> str | None:
        """The last statement's command tag, as "UPDATE 1"."""
        return cast(Optional[str], self.cursor.statusmessage)

    @property
    def description(self) -> Sequence[Any] | None:
        """The columns of the last statement's result, None without one."""
        return cast(Optional[Sequence[Any]], self.cursor.description)
