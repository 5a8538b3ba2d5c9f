#!/usr/bin/env python3
"""A stage program for the package's tests. A payload "STAGE:ACTION" says
what the stage named STAGE does with the message; any other stage passes it
on. The default is to advance it to --next, or finish it without one.

  fail    Fail("asked to fail")
  pause   Pause(0.2) on the first attempt, then the default
  raise   raises RuntimeError("asked to raise") after its work
  kill    the first time: terminates its own database session (75)
  hang    marks "hanging" with its pid, then sleeps for ever (SIGTERM)
  sleep   marks "hanging" with its pid, then runs pg_sleep for ever (SIGTERM)
  print   prints to stdout (which run makes a log line), then the default

Every pass does work: a row in test_work (id, stage, token), in the pass's
transaction, and a header STAGE = "python" queued with the move. Marks
(test_marks) are committed at once, on a connection of their own.
--async serves the same with an async def handler.
"""

import argparse
import asyncio
import os
import time

import psycopg2

from pepsi_stage import Advance, AsyncCursor, Cursor, Fail, Finish, Message, Move, Pause, run

ap = argparse.ArgumentParser()
ap.add_argument("--next", default="")
ap.add_argument("--async", dest="use_async", action="store_true")
args, _ = ap.parse_known_args()


def mark(m: Message, what: str) -> bool:
    """Record what for m once, at once; whether it was recorded before."""
    c = psycopg2.connect(os.environ["PEPSI_DSN"])
    try:
        c.autocommit = True
        cur = c.cursor()
        cur.execute("SELECT count(*) FROM test_marks WHERE id = %s AND what = %s", (m.id, what))
        row = cur.fetchone()
        cur.execute("INSERT INTO test_marks (id, what, pid) VALUES (%s, %s, %s)", (m.id, what, os.getpid()))
    finally:
        c.close()
    return row is not None and row[0] > 0


def action(m: Message) -> str:
    stage, _, act = m.payload.decode().partition(":")
    return act if stage == m.stage else ""


def default() -> Move:
    return Advance(args.next) if args.next else Finish()


WORK = "INSERT INTO test_work (id, stage, token) VALUES (%s, %s, %s)"
HEADER = "UPDATE pepsi.message SET headers = headers || jsonb_build_object(%s::text, 'python') WHERE id = %s"


def decide(m: Message, act: str) -> Move:
    m.queue(HEADER, (m.stage, m.id))
    if act == "fail":
        return Fail("asked to fail")
    if act == "pause" and m.attempts == 1:
        return Pause(0.2)
    if act == "raise":
        raise RuntimeError("asked to raise")
    if act == "print":
        print("a print in a handler")
    return default()


def handle(m: Message, cur: Cursor) -> Move:
    act = action(m)
    cur.execute(WORK, (m.id, m.stage, m.token))
    if act == "kill" and not mark(m, "killed"):
        cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    if act == "hang":
        mark(m, "hanging")
        time.sleep(3600)
    if act == "sleep":
        mark(m, "hanging")
        cur.execute("SELECT pg_sleep(3600)")
    return decide(m, act)


async def ahandle(m: Message, cur: AsyncCursor) -> Move:
    act = action(m)
    await cur.execute(WORK, (m.id, m.stage, m.token))
    if act == "kill" and not mark(m, "killed"):
        await cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    if act == "hang":
        mark(m, "hanging")
        await asyncio.sleep(3600)
    if act == "sleep":
        mark(m, "hanging")
        await cur.execute("SELECT pg_sleep(3600)")
    return decide(m, act)


if __name__ == "__main__":
    if args.use_async:
        run(ahandle)
    run(handle)
