"""The message a pass serves, and the moves a handler returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Union

from psycopg.abc import Params, Query

from ._protocol import check_stage


@dataclass(frozen=True)
class Advance:
    """On to another stage; the dispatcher queues the message there. stage
    must differ from the current one (to run it again here, Pause it)."""

    stage: str


@dataclass(frozen=True)
class Finish:
    """Done."""


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


Move = Union[Advance, Finish, Pause, Fail]
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
    if isinstance(move, (Finish, Fail)):
        return move
    raise PassError(f"the handler returned {move!r}, not a move (Advance, Finish, Pause or Fail)")


def check_fused(m: Message) -> None:
    """Refuse a fused stage that is not a stage name."""
    for stage, _ in m.fused_stages:
        if not check_stage(stage):
            raise PassError(f"fused stage {stage!r} is not a stage name")


def move_statement(move: Move, m: Message) -> tuple[Query, tuple[Any, ...]]:
    """The SQL API call that makes move for m in the pass's transaction,
    presenting the pass's token (NULL for a bare id)."""
    if isinstance(move, Advance):
        return "SELECT pepsi.advance(%s::int8, %s::text, %s::int8)", (m.id, move.stage, m.token)
    if isinstance(move, Finish):
        return "SELECT pepsi.finish(%s::int8, %s::int8)", (m.id, m.token)
    if isinstance(move, Pause):
        return "SELECT pepsi.pause(%s::int8, make_interval(secs => %s::float8), %s::int8)", (m.id, float(move.seconds), m.token)
    return "SELECT pepsi.fail(%s::int8, %s::text, %s::int8)", (m.id, move.reason, m.token)


# The read of a message, as pkg/worker's: its queue row among the unfinished
# ones (pepsi.state_live) and its message row through pepsi.message_row,
# whose plan is kept. A pass with a token reads without a lock (the move's
# token is the fence); a bare id locks its queue row.
READ = """SELECT s.stage, s.status, s.attempts, s.pass, m.created_at, m.headers, m.payload
  FROM pepsi.state_live s, pepsi.message_row(s.id) m
 WHERE s.id = %s::int8"""
READ_LOCKED = READ + " FOR UPDATE OF s"
EXPLAIN = "SELECT status, stage FROM pepsi.state WHERE id = %s::int8"


def read_sql(token: int | None) -> Query:
    """The read of a pass's message in its transaction."""
    return READ if token is not None else READ_LOCKED


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
