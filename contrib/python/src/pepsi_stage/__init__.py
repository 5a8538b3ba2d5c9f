"""pepsi_stage: pepsi stage programs in Python, the stage side of the worker
protocol (pepsi-worker(7)) around one function, as Go's pkg/worker.

A stage is a handler and a call to run:

    from pepsi_stage import Advance, Fail, run

    def handle(m, cur):
        if not m.payload:
            return Fail("empty payload")
        cur.execute("INSERT INTO seen (id) VALUES (%s) ON CONFLICT DO NOTHING", (m.id,))
        return Advance("deliver")

    run(handle)

run reads -c FILE (the dispatcher appends it to PROGRAM; other arguments
are the stage's own), connects to the database once ($PEPSI_DSN, which the
dispatcher sets, else [database] DSN of the configuration file), and serves
message ids from stdin until end of file. Each pass is a transaction that
reads the message and checks that it is running (its pass, given a token),
calls the handler with the Message and a cursor in that transaction, and
then makes the move it returns with the SQL API (pepsi.advance,
pepsi.finish, pepsi.pause, pepsi.fail, pepsi.join) and commits, before the answer "0".
Statements the handler queued (Message.queue), the move and COMMIT go out
in one round trip, as one string of statements with their parameters in
it, with the next message's BEGIN and read when its id has come already.

A handler that raises rolls the pass back and answers "1 # reason". A lost
connection answers 75 (the message is put back, not counted) and exits 75.
SIGTERM stops at once: the message in hand is rolled back, unanswered, and
the program exits 0. Serialization failures and deadlocks run the pass
again, up to three times. When $PEPSI_PROTOCOL is 2 or more, run asks for
pass tokens ("hello token") and presents each pass's token on its move; from
3 on it asks for trace contexts too ("hello token trace"): a dispatcher
with TRACING on then gives each pass its span's W3C traceparent, which the
handler finds in Message.traceparent (None otherwise).

A handler may fan its message out: Message.spawn and spawn_many make
children in the pass's transaction, and the move Join(stage) parks the
message until every child has ended; the dispatcher then hands it to stage,
where Message.children reads what they left (Finish(result=...)).

The database driver is psycopg2, and the handler's cursor psycopg2's. An
async def handler runs on an asyncio event loop and gets an AsyncCursor,
whose statements run on a thread of their own and are awaited.
run_one_trip serves a handler whose work is only queued statements, each
pass in one round trip with no read.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable, NoReturn, overload

import psycopg2
import psycopg2.extensions as ext

from ._acursor import AsyncCursor
from ._config import ConfigError, config_arg, resolve_dsn
from ._db import Cursor, connect, keep_cancelling, one_line
from ._log import Log
from ._message import MAX_RESULT, Advance, Child, Fail, Finish, Join, Message, Move, Pause
from ._protocol import HELLO_TOKEN, HELLO_TRACE, NOT_RUN, LineReader, Writer, env_protocol
from ._sync import AsyncHandler, Handler, OneTripHandler, SyncRunner

__all__ = [
    "Advance",
    "AsyncCursor",
    "AsyncHandler",
    "Child",
    "Cursor",
    "Fail",
    "Finish",
    "Handler",
    "Join",
    "MAX_RESULT",
    "Message",
    "Move",
    "NOT_RUN",
    "OneTripHandler",
    "Pause",
    "main",
    "run",
    "run_one_trip",
]


class _Stop(BaseException):
    """SIGTERM or SIGINT: stop at once (not an Exception, which handlers catch)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop()


def _is_async(handler: object) -> bool:
    """Whether handler is an async def function (or a functools.partial of
    one). Not inspect.iscoroutinefunction: a stage that is not async imports
    neither inspect nor asyncio, and starts sooner."""
    while hasattr(handler, "func") and hasattr(handler, "args"):
        handler = handler.func
    code = getattr(handler, "__code__", None)
    return bool(getattr(code, "co_flags", 0) & 0x80)  # CO_COROUTINE


def _cancel_on_stop(conn: ext.connection) -> Callable[[], None]:
    """Cancel the statement running on conn when SIGTERM or SIGINT comes,
    until the function returned is called. psycopg2 waits for a statement
    in C, where Python's handler of the signal cannot run until it returns;
    the signal's wakeup byte wakes a thread that cancels it, and the
    handler then stops the program."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    prev = signal.set_wakeup_fd(w)

    def watch() -> None:
        while True:
            b = os.read(r, 1)
            if not b:  # undone
                os.close(r)
                return
            if b[0] in (signal.SIGTERM, signal.SIGINT):  # not another signal the stage's own handler catches
                keep_cancelling(conn)

    threading.Thread(target=watch, name="pepsi-stop", daemon=True).start()

    def undo() -> None:
        signal.set_wakeup_fd(prev)
        os.close(w)

    return undo


def _protocol_fd() -> int:
    """The status lines' file descriptor: a copy of stdout's, while fd 1 and
    sys.stdout become stderr, so that a print() in a handler is a log line,
    not a protocol error."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return fd


@overload
def main(handler: Handler, *, argv: list[str] | None = None) -> int: ...
@overload
def main(handler: AsyncHandler, *, argv: list[str] | None = None) -> int: ...
def main(handler: Handler | AsyncHandler, *, argv: list[str] | None = None) -> int:
    """Serve handler on stdin and stdout as a stage program; return the exit
    status: 0 at end of file or after SIGTERM, 75 when the database cannot
    be reached or the connection is lost, 1 when stdout breaks, 2 for a
    configuration error. argv defaults to sys.argv[1:]."""
    return _main(handler, argv, one_trip=False)


def _main(handler: Any, argv: list[str] | None, one_trip: bool) -> int:
    name = os.path.basename(sys.argv[0] or "pepsi-stage")
    log = Log(name)
    try:
        dsn = resolve_dsn(config_arg(sys.argv[1:] if argv is None else argv))
    except ConfigError as e:
        log.error("%s", e)
        return 2
    stage = os.environ.get("PEPSI_STAGE", "")
    out = Writer(_protocol_fd())
    reader = LineReader(sys.stdin.fileno())
    prev = signal.signal(signal.SIGTERM, _raise_stop)
    prev_int = signal.signal(signal.SIGINT, _raise_stop)
    try:
        if env_protocol() >= 2:
            # First, before connecting: ids the dispatcher writes before it
            # reads the hello come without their tokens.
            out.write((HELLO_TRACE if env_protocol() >= 3 else HELLO_TOKEN).encode() + b"\n")
        app = "pepsi-worker " + (stage or name)
        try:
            conn = connect(dsn, app)
        except psycopg2.Error as e:
            log.error("connect to database: %s", one_line(e))
            return NOT_RUN
        try:
            if _is_async(handler):
                from ._async import serve

                return serve(conn, handler, stage, log, reader, out)
            undo = _cancel_on_stop(conn)
            try:
                return SyncRunner(conn, handler, stage, log, one_trip).loop(reader, out)
            finally:
                undo()
        except psycopg2.Error as e:  # at start (the runner's own set-up); a pass answers its own
            log.error("database: %s", one_line(e))
            return NOT_RUN
        finally:
            conn.close()
    except _Stop:
        return 0  # the message in hand is rolled back by the server, unanswered
    except OSError as e:
        log.error("writing status lines: %s", e)
        return 1
    finally:
        signal.signal(signal.SIGTERM, prev)
        signal.signal(signal.SIGINT, prev_int)


@overload
def run(handler: Handler) -> NoReturn: ...
@overload
def run(handler: AsyncHandler) -> NoReturn: ...
def run(handler: Handler | AsyncHandler) -> NoReturn:
    """Serve handler as a stage program (see main) and exit with its status."""
    sys.exit(_main(handler, None, one_trip=False))


def run_one_trip(handler: OneTripHandler) -> NoReturn:
    """Serve a handler whose work is statements queued with Message.queue,
    each pass in one round trip: the handler runs first, knowing only the
    message's id, token and stage; then BEGIN, its statements, the move and
    COMMIT go out together. The move's UPDATE locks the queue row and
    refuses a message no longer running (this pass), which rolls the work
    back with it. Exits as run does."""
    sys.exit(_main(handler, None, one_trip=True))
