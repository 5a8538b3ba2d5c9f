"""The message a pass serves, and the moves a handler returns."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Awaitable, Union, overload

import psycopg2.extensions as ext

from ._acursor import AsyncCursor
from ._db import Params, Query, mogrify
from ._protocol import check_stage


@dataclass(frozen=True)
class Advance:
    """On to another stage; the dispatcher queues the message there. stage
    must differ from the current one (to run it again here, Pause it)."""

    stage: str


MAX_RESULT = 64 << 10
"""The longest result Finish may leave (pepsi.finish's p_result): 64 KiB."""


@dataclass(frozen=True)
class Finish:
    """Done; with result (bytes, at most MAX_RESULT), left for the join
    stage of the message's parent to read (Message.children)."""

    result: bytes | None = None


@dataclass(frozen=True)
class Pause:
    """Paused: the dispatcher hands the message to this stage again once
    seconds have passed."""

    seconds: float


@dataclass(frozen=True)
class Fail:
    """Failed, a dead letter, with reason in its error column. The pass
    itself succeeded: the answer is 0."""

    reason: str


@dataclass(frozen=True)
class Join:
    """Waiting at stage until every child the message spawned (Message.spawn,
    spawn_many) has ended; the dispatcher then queues it there (at once when
    none is open). With JOIN_POLICY = fail, the default, a child that failed
    fails it instead. stage may be the current one."""

    stage: str


@dataclass(frozen=True)
class Child:
    """One child of a message, as its join stage reads it (pepsi.children)."""

    id: int
    stage: str
    """Where it is, or ended."""
    status: str
    """pending, running, paused, held, waiting, done, failed or cancelled."""
    error: str | None
    """Why a failed or cancelled child ended so; None otherwise."""
    result: bytes | None
    """What its stage left with Finish(result=...); None when none."""
    updated_at: datetime
    """Its last change."""


Move = Union[Advance, Finish, Pause, Fail, Join]
"""What becomes of a message after a successful pass."""


@dataclass(eq=False)
class Message:
    """The message being served, read from its rows (in the default mode;
    run_one_trip knows only id, token and stage)."""

    id: int
    """The message id."""
    token: int | None
    """The pass's token, None for a bare id (pepsi-worker(7), PASS TOKENS)."""
    stage: str
    """The stage it is running at."""
    attempts: int = 0
    """Passes at this stage, this one included (1 the first time)."""
    created_at: datetime | None = None
    """When it entered the queue."""
    headers: dict[str, Any] = field(default_factory=dict)
    """pepsi.message.headers, a JSON object."""
    payload: bytes = b""
    """pepsi.message.payload."""
    queued: list[tuple[Query, Params | None]] = field(default_factory=list, repr=False)
    """The statements queue() added, in order."""
    fused_stages: list[tuple[str, float]] = field(default_factory=list, repr=False)
    """The stages fused() reported."""
    traceparent: str | None = None
    """The W3C traceparent of the dispatcher's span of this pass, None when it
    sent none (TRACING off, or $PEPSI_PROTOCOL below 3): start the stage's own
    spans as its children (contrib/python/README.md shows how)."""

    @property
    def attempt(self) -> int:
        """The same as attempts."""
        return self.attempts

    def queue(self, sql: Query, params: Params | None = None) -> None:
        """Add a statement whose result the stage does not need to the
        pass's transaction: it runs after the handler returns, in the order
        queued, and goes out with the move and COMMIT in one round trip. An
        error in it fails the pass, rolled back whole."""
        self.queued.append((sql, params))

    def fused(self, stage: str, seconds: float) -> None:
        """Report that this pass also did the work of stage, which took
        seconds: the dispatcher books it to that stage's statistics."""
        self.fused_stages.append((stage, seconds))

    @overload
    def spawn(
        self,
        cur: ext.cursor,
        stage: str,
        payload: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        priority: int = 0,
        key: str | None = None,
    ) -> int: ...
    @overload
    def spawn(
        self,
        cur: AsyncCursor,
        stage: str,
        payload: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        priority: int = 0,
        key: str | None = None,
    ) -> Awaitable[int]: ...
    @overload
    def spawn(
        self,
        cur: None,
        stage: str,
        payload: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        priority: int = 0,
        key: str | None = None,
    ) -> None: ...
    def spawn(
        self,
        cur: ext.cursor | AsyncCursor | None,
        stage: str,
        payload: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        priority: int = 0,
        key: str | None = None,
    ) -> int | Awaitable[int] | None:
        """Make one child of the message, pending at stage, in the pass's
        transaction (the handler's cursor; an async one's call is awaited),
        and return its id: the dispatcher sees it when the pass commits, with
        the move (Join, usually). headers, priority and key (a deduplication
        key) are the child's own. cur None (run_one_trip) queues it with the
        move, as queue does, and returns None. The server refuses a message
        not running (this pass), a key an unfinished message holds, and a
        child more than pepsi.spawn_depth() (16) levels below the message
        first enqueued."""
        params = (self.id, stage, bytes(payload), _headers(headers), priority, key or None, self.token)
        return _one(cur, SPAWN, params, self)

    @overload
    def spawn_many(
        self, cur: ext.cursor, stage: str, payloads: list[bytes], *, headers: dict[str, str] | None = None, priority: int = 0
    ) -> int: ...
    @overload
    def spawn_many(
        self,
        cur: AsyncCursor,
        stage: str,
        payloads: list[bytes],
        *,
        headers: dict[str, str] | None = None,
        priority: int = 0,
    ) -> Awaitable[int]: ...
    @overload
    def spawn_many(
        self, cur: None, stage: str, payloads: list[bytes], *, headers: dict[str, str] | None = None, priority: int = 0
    ) -> None: ...
    def spawn_many(
        self,
        cur: ext.cursor | AsyncCursor | None,
        stage: str,
        payloads: list[bytes],
        *,
        headers: dict[str, str] | None = None,
        priority: int = 0,
    ) -> int | Awaitable[int] | None:
        """Make one child of the message per payload, all pending at stage
        with the same headers and priority, in one statement, and return how
        many; none makes none (a Join then goes straight on). As spawn, with
        no key."""
        params = (self.id, stage, [bytes(p) for p in payloads], _headers(headers), priority, self.token)
        return _one(cur, SPAWN_MANY, params, self)

    @overload
    def children(self, cur: ext.cursor) -> list[Child]: ...
    @overload
    def children(self, cur: AsyncCursor) -> Awaitable[list[Child]]: ...
    def children(self, cur: ext.cursor | AsyncCursor) -> list[Child] | Awaitable[list[Child]]:
        """The message's children, in the order they were spawned, read in
        the pass's transaction: what a join stage reads of its fan-out
        (pepsi.children). With an async cursor, await it."""
        if isinstance(cur, AsyncCursor):
            return _achildren(cur, self.id)
        with cur.connection.cursor() as c:
            c.execute(CHILDREN, (self.id,))
            return [_child(r) for r in c.fetchall()]


# The SQL API's graph calls (sql/functions/30_graph.sql); a NULL token is a
# bare id's.
SPAWN = "SELECT pepsi.spawn(%s::int8, %s::text, %s::bytea, %s::jsonb, %s::int4, %s::text, %s::int8)"
SPAWN_MANY = "SELECT pepsi.spawn_many(%s::int8, %s::text, %s::bytea[], %s::jsonb, %s::int4, %s::int8)"
CHILDREN = "SELECT id, stage, status, error, result, updated_at FROM pepsi.children(%s::int8)"


def _headers(headers: dict[str, str] | None) -> str | None:
    """A child's headers as JSON text, None for none."""
    return json.dumps(headers) if headers else None


def _one(
    cur: ext.cursor | AsyncCursor | None, sql: Query, params: tuple[Any, ...], m: Message
) -> int | Awaitable[int] | None:
    """The number sql returns, run on cur (awaitable for an async cursor),
    or sql queued with m's move when cur is None."""
    if cur is None:
        m.queue(sql, params)
        return None
    if isinstance(cur, AsyncCursor):
        return _aone(cur, sql, params)
    with cur.connection.cursor() as c:
        c.execute(sql, params)
        row = c.fetchone()
    assert row is not None
    return int(row[0])


async def _aone(cur: AsyncCursor, sql: Query, params: tuple[Any, ...]) -> int:
    row = await (await cur.sibling().execute(sql, params)).fetchone()
    assert row is not None
    return int(row[0])


async def _achildren(cur: AsyncCursor, mid: int) -> list[Child]:
    c = await cur.sibling().execute(CHILDREN, (mid,))
    return [_child(r) for r in await c.fetchall()]


def _child(r: tuple[Any, ...]) -> Child:
    """A row of CHILDREN as a Child."""
    return Child(r[0], r[1], r[2], r[3], None if r[4] is None else bytes(r[4]), r[5])


class PassError(Exception):
    """A pass that cannot go on: the message is not running (this pass), or
    the handler broke the rules. Its text is the status line's reason."""


def check_move(move: object, m: Message) -> Move:
    """move, if the handler returned a move that can be made for m."""
    if isinstance(move, Advance):
        if not check_stage(move.stage):
            raise PassError(f"cannot advance to {move.stage!r}: not a stage name")
        if move.stage == m.stage:
            raise PassError(f"cannot advance to {move.stage}: the message is already there (to run it again, pause it)")
        return move
    if isinstance(move, Pause):
        if not isinstance(move.seconds, (int, float)) or not move.seconds >= 0 or math.isinf(move.seconds):
            raise PassError(f"cannot pause for {move.seconds!r} s: not a non-negative number")
        return move
    if isinstance(move, Join):
        if not check_stage(move.stage):
            raise PassError(f"cannot join at {move.stage!r}: not a stage name")
        return move
    if isinstance(move, Finish):
        if move.result is not None:
            if not isinstance(move.result, (bytes, bytearray, memoryview)):
                raise PassError(f"cannot finish with a result of type {type(move.result).__name__}: want bytes")
            if len(move.result) > MAX_RESULT:
                raise PassError(f"cannot finish with a result of {len(move.result)} bytes: at most {MAX_RESULT} (64 KiB)")
        return move
    if isinstance(move, Fail):
        return move
    raise PassError(f"the handler returned {move!r}, not a move (Advance, Finish, Pause, Fail or Join)")


def check_fused(m: Message) -> None:
    """Refuse a fused stage that is not a stage name."""
    for stage, _ in m.fused_stages:
        if not check_stage(stage):
            raise PassError(f"fused stage {stage!r} is not a stage name")


ADVANCE = "SELECT pepsi.advance(%s::int8, %s::text, %s::int8)"
FINISH = "SELECT pepsi.finish(%s::int8, %s::int8)"
FINISH_RESULT = "SELECT pepsi.finish(%s::int8, %s::int8, %s::bytea)"
JOIN = "SELECT pepsi.join(%s::int8, %s::text, %s::int8)"
PAUSE = "SELECT pepsi.pause(%s::int8, make_interval(secs => %s::float8), %s::int8)"
FAIL = "SELECT pepsi.fail(%s::int8, %s::text, %s::int8)"


def move_statement(move: Move, m: Message) -> tuple[str, tuple[Any, ...]]:
    """The SQL API call that makes move for m in the pass's transaction,
    presenting the pass's token (NULL for a bare id)."""
    if isinstance(move, Advance):
        return ADVANCE, (m.id, move.stage, m.token)
    if isinstance(move, Finish):
        if move.result is not None:
            return FINISH_RESULT, (m.id, m.token, bytes(move.result))
        return FINISH, (m.id, m.token)
    if isinstance(move, Join):
        return JOIN, (m.id, move.stage, m.token)
    if isinstance(move, Pause):
        return PAUSE, (m.id, float(move.seconds), m.token)
    return FAIL, (m.id, move.reason, m.token)


# The read of a message, as pkg/worker's: its queue row among the unfinished
# ones (pepsi.state_live) and its message row through pepsi.message_row,
# whose plan is kept. A pass with a token reads without a lock (the move's
# token is the fence); a bare id locks its queue row.
READ = """SELECT s.stage, s.status, s.attempts, s.pass, m.created_at, m.headers, m.payload
  FROM pepsi.state_live s, pepsi.message_row(s.id) m
 WHERE s.id = %s::int8"""
READ_LOCKED = READ + " FOR UPDATE OF s"
EXPLAIN = "SELECT status, stage FROM pepsi.state WHERE id = %s::int8"
OPEN = "SELECT status = 'running' AND pass = %s::int8 FROM pepsi.state WHERE id = %s::int8"
"""Whether a pass is still open: no move of its has committed."""


class Statements:
    """The package's statements of a pass on one connection: prepared (sent
    as EXECUTE, so that the server plans each once) unless the connection is
    behind a pooler, where a prepared statement would not outlive the
    transaction."""

    LIST = (READ, READ_LOCKED, ADVANCE, FINISH, FINISH_RESULT, JOIN, PAUSE, FAIL)

    def __init__(self, prepared: bool) -> None:
        self.prepared = prepared
        self.sent: dict[str, str] = {}
        if prepared:
            for i, sql in enumerate(self.LIST):
                self.sent[sql] = f"EXECUTE pepsi_stage_{i}(" + ", ".join(["%s"] * sql.count("%s")) + ")"

    def prepare(self) -> str:
        """The PREPARE statements of LIST, one string ("" when not prepared)."""
        if not self.prepared:
            return ""
        out = []
        for i, sql in enumerate(self.LIST):
            parts = sql.split("%s")
            body = parts[0] + "".join(f"${n}{p}" for n, p in enumerate(parts[1:], 1))
            out.append(f"PREPARE pepsi_stage_{i} AS {body}")
        return ";\n".join(out)

    def __call__(self, sql: str) -> str:
        """What to send for sql, one of LIST."""
        return self.sent.get(sql, sql)

    def begin_read(self, token: int | None) -> str:
        """BEGIN and the read of a pass's message, one string."""
        return "BEGIN; " + self(READ if token is not None else READ_LOCKED)

    def end_pass(self, cur: ext.cursor, m: Message, move: Move, nxt: tuple[int, int | None] | None) -> bytes:
        """One string for the end of a pass: m's queued statements, the move
        and COMMIT; then, given the next id line (whose message has a
        token), BEGIN and its message's read, whose row is the string's result."""
        parts = [mogrify(cur, q, p) for q, p in m.queued]
        sql, args = move_statement(move, m)
        parts.append(mogrify(cur, self(sql), args))
        parts.append(b"COMMIT")
        if nxt is not None:
            parts.append(b"BEGIN")
            parts.append(mogrify(cur, self(READ), (nxt[0],)))
        return b";\n".join(parts)


def scan(m: Message, row: tuple[Any, ...] | None) -> bool:
    """Fill m from READ's row and check that it is running (its pass, given
    a token): PassError if not, False if there was no row (explain it)."""
    if row is None:
        return False
    stage, status, attempts, token, created_at, headers, payload = row
    m.stage, m.attempts, m.created_at = stage, attempts, created_at
    m.headers = headers if isinstance(headers, dict) else {}
    m.payload = bytes(payload) if payload is not None else b""
    if status != "running":
        raise PassError(f"message {m.id} is not running (it is {status} at stage {stage})")
    if m.token is not None and token != m.token:
        raise PassError(
            f"message {m.id} is not running pass {m.token}: that pass is over (it runs pass {token} at stage {stage})"
        )
    return True


def explain(m: Message, row: tuple[Any, ...] | None) -> PassError:
    """Why message m, which READ did not find, is not served; row is EXPLAIN's."""
    if row is None or row[0] == "running":
        return PassError(f"message {m.id} does not exist")
    return PassError(f"message {m.id} is not running (it is {row[0]} at stage {row[1]})")
