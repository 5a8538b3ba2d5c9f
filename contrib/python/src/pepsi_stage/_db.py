"""The database side: psycopg2's connection as the package uses it."""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence, Union, cast

import psycopg2
import psycopg2.errors
import psycopg2.extensions as ext
import psycopg2.sql

Query = Union[str, bytes, psycopg2.sql.Composable]
"""A statement: text with %s (or %(name)s) placeholders, or psycopg2.sql's."""

Params = Union[Sequence[Any], Mapping[str, Any]]
"""A statement's parameters."""

Cursor = ext.cursor
"""The cursor a handler does its work with, in the pass's transaction."""

TRANSIENT = (psycopg2.errors.SerializationFailure, psycopg2.errors.DeadlockDetected)
"""Errors after which a pass runs again."""

IDLE = ext.TRANSACTION_STATUS_IDLE
INTRANS = ext.TRANSACTION_STATUS_INTRANS


def _bytes(value: str | None, cur: Any) -> bytes | None:
    """A bytea value as bytes, where psycopg2 gives a memoryview."""
    if value is None:
        return None
    return bytes(psycopg2.BINARY(value, cur))


# Debian 12's psycopg2 stubs (python3-typeshed) leave these untyped.
BYTEA: Any = ext.new_type(psycopg2.BINARY.values, "PEPSI_BYTEA", _bytes)  # type: ignore[no-untyped-call]
BYTEA_ARRAY: Any = ext.new_array_type((1001,), "PEPSI_BYTEA[]", BYTEA)  # type: ignore[no-untyped-call]


def bytes_for_bytea(conn: ext.connection) -> None:
    """Make conn give bytea values (and arrays of them) as bytes."""
    ext.register_type(BYTEA, conn)  # type: ignore[no-untyped-call]
    ext.register_type(BYTEA_ARRAY, conn)  # type: ignore[no-untyped-call]


def mogrify(cur: ext.cursor, query: Query, params: Params | None) -> bytes:
    """query as cur would send it, with params in it."""
    return cast(bytes, cur.mogrify(query, params))  # type: ignore[no-untyped-call]


def connect(dsn: str, app: str) -> ext.connection:
    """A connection in autocommit mode (the package writes its own BEGIN and
    COMMIT), whose bytea values come as bytes; application_name is app
    unless the DSN names one."""
    kw: dict[str, Any] = {}
    try:
        if "application_name" not in ext.parse_dsn(dsn):
            kw["application_name"] = app
    except psycopg2.Error:
        kw["application_name"] = app
    conn: ext.connection = psycopg2.connect(dsn, **kw)
    conn.autocommit = True
    bytes_for_bytea(conn)
    return conn


def behind_pooler(conn: ext.connection) -> bool:
    """Whether conn is not PostgreSQL's own session: the server process that
    runs its statements is not the one whose key it got at start-up (a
    pooler sends a key of its own). There statements must not be prepared."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        row = cur.fetchone()
    return row is None or row[0] != conn.get_backend_pid()


def lost(conn: ext.connection) -> bool:
    """Whether conn is gone for good (closed, or broken by a failure)."""
    return bool(conn.closed)


def rollback(conn: ext.connection, cur: ext.cursor) -> None:
    """End the transaction open on conn, if any."""
    if lost(conn) or conn.get_transaction_status() == IDLE:
        return
    try:
        cur.execute("ROLLBACK")
    except psycopg2.Error:
        pass


def keep_cancelling(conn: ext.connection) -> None:
    """Cancel the statement running on conn, and again every 0.1 s until the
    program ends: a cancel that comes before its statement has reached the
    server cancels nothing. For a thread of its own, while the program stops."""
    while not conn.closed:
        try:
            conn.cancel()
        except psycopg2.Error:
            pass
        time.sleep(0.1)


def one_line(e: BaseException) -> str:
    """An error's text on one line."""
    return " ".join(str(e).split())
