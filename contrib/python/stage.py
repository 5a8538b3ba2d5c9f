#!/usr/bin/python3
"""contrib/python/stage.py — an example pepsi stage program in Python.

It does exactly what contrib/go/stage and contrib/shell/stage.sh do:
  - adds the header STAGE = "python" to the message (work in its transaction);
  - fails an empty payload: "empty payload";
  - pauses the payload "retry" for a second on its first attempt at a stage;
  - otherwise advances the message to the stage given by --next, or
    finishes it when there is none.

In pepsi.conf:
    [stage-parse]
    PROGRAM = /usr/local/lib/pepsi/stage.py --next deliver

Needs psycopg2 (Debian: apt-get install python3-psycopg2). The shebang names
Debian's /usr/bin/python3, the interpreter that package is built for;
change it if your psycopg2 lives elsewhere.

The protocol (pepsi-worker(7)): one message id per line on stdin, exactly
one status line per id on stdout, in order: "0" once the message has been
moved (advanced, finished, paused or failed) in a committed transaction,
"1 # reason" when this pass failed. Logs go to stderr. One connection serves
every message (PEPSI_DSN, set by the dispatcher); each message is one
transaction that reads it and moves it with the SQL API: pepsi.advance,
pepsi.finish, pepsi.pause, pepsi.fail.

Pass tokens: when the dispatcher says it speaks protocol 2 or later
(PEPSI_PROTOCOL), the program first writes the hello line "hello token";
from then on an id line may carry the pass's token ("ID TOKEN"). The move
presents it as its last argument, and the server refuses it (SQLSTATE
55000) unless the message is still running that very pass, so a pass the
dispatcher gave up cannot move the message; the read then needs no lock.
A bare id (written before the dispatcher read the hello) is read with its
queue row locked (FOR UPDATE) and moved with a NULL token, as before.

EOF on stdin: exit 0. SIGTERM (the dispatcher stopping): Python's default
action ends the process at once; the server rolls the open transaction back
and the dispatcher requeues the message.
"""

import argparse
import os
import sys

import psycopg2


def log(*args):
    print("stage.py:", *args, file=sys.stderr, flush=True)


# The status (and exit status) that says the database, not the message,
# failed: the dispatcher puts the message back (pepsi-worker(7)).
NOT_RUN = 75


class NotRunning(Exception):
    pass


# The read of a message: with its pass's token, a plain read of that pass
# (the move's token is the fence); for a bare id, the row locked.
READ = """SELECT m.payload, s.attempts
            FROM pepsi.state s, pepsi.message_row(s.id) m
           WHERE s.id = %s AND s.status = 'running'"""
READ_PASS = READ + " AND s.pass = %s"
READ_LOCKED = READ + " FOR UPDATE OF s"


def handle(conn, stage, next_stage, msg_id, token):
    """One pass: a transaction that moves the message (or raises). token is
    the pass's, or None for a bare id (the moves then get NULL)."""
    with conn:  # commits on success, rolls back on an exception
        with conn.cursor() as cur:
            if token is None:
                cur.execute(READ_LOCKED, (msg_id,))
            else:
                cur.execute(READ_PASS, (msg_id, token))
            row = cur.fetchone()
            if row is None:
                raise NotRunning(f"message {msg_id} is not running" + (f" pass {token}" if token else ""))
            payload, attempts = bytes(row[0]), row[1]
            cur.execute(
                "UPDATE pepsi.message SET headers = headers || jsonb_build_object(%s::text, 'python')"
                " WHERE id = %s",
                (stage, msg_id),
            )
            if payload == b"":
                cur.execute("SELECT pepsi.fail(%s, %s, %s)", (msg_id, "empty payload", token))
            elif payload == b"retry" and attempts == 1:
                cur.execute("SELECT pepsi.pause(%s, interval '1 second', %s)", (msg_id, token))
            elif next_stage:
                cur.execute("SELECT pepsi.advance(%s, %s, %s)", (msg_id, next_stage, token))
            else:
                cur.execute("SELECT pepsi.finish(%s, %s)", (msg_id, token))


def protocol():
    """The protocol version the dispatcher speaks (PEPSI_PROTOCOL), 0 if none."""
    try:
        return int(os.environ.get("PEPSI_PROTOCOL", ""))
    except ValueError:
        return 0


def parse_id_line(line):
    """An id line, "ID" or "ID TOKEN": (id, token or None); ValueError if bad."""
    fields = line.split()
    if not 1 <= len(fields) <= 2:
        raise ValueError(line)
    nums = [int(f) for f in fields]
    if min(nums) <= 0:
        raise ValueError(line)
    return nums[0], (nums[1] if len(nums) == 2 else None)


def main():
    ap = argparse.ArgumentParser(description="example pepsi stage")
    ap.add_argument("-c", metavar="CONFIG_FILE", help="the dispatcher's pepsi.conf (unused: PEPSI_DSN is enough)")
    ap.add_argument("--next", metavar="STAGE", default="", help="advance messages to STAGE (default: finish them)")
    args = ap.parse_args()
    dsn, stage = os.environ.get("PEPSI_DSN"), os.environ.get("PEPSI_STAGE")
    if not dsn or not stage:
        log("PEPSI_DSN and PEPSI_STAGE must be set (the dispatcher sets them)")
        return 2
    try:
        conn = psycopg2.connect(dsn, application_name="pepsi-worker " + stage)
    except psycopg2.Error as e:
        log("connect:", str(e).strip())
        return NOT_RUN

    out = sys.stdout
    if protocol() >= 2:
        out.write("hello token\n")  # before any status line: ask for pass tokens
        out.flush()
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0  # EOF
        try:
            msg_id, token = parse_id_line(line)
        except ValueError:
            log("bad message id", repr(line))
            out.write("1 # bad message id\n")
            out.flush()
            continue
        try:
            handle(conn, stage, args.next, msg_id, token)
            out.write("0\n")
        except (NotRunning, psycopg2.Error) as e:
            reason = " ".join(str(e).split())
            if conn.closed:
                # Not the message's fault: 75 (NOT_RUN) puts it back
                # without counting the pass, and so does the exit status.
                log(f"message {msg_id} not run: database connection lost: {reason}")
                out.write(f"{NOT_RUN} # database connection lost: {reason}\n")
                out.flush()
                return NOT_RUN
            log(f"message {msg_id}: {reason}")
            out.write(f"1 # {reason}\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
