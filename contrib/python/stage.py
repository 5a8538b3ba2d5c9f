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
transaction that holds its queue row (SELECT ... FOR UPDATE) and moves it
with the SQL API: pepsi.advance, pepsi.finish, pepsi.pause, pepsi.fail.

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


def handle(conn, stage, next_stage, msg_id):
    """One pass: a transaction that moves the message (or raises)."""
    with conn:  # commits on success, rolls back on an exception
        with conn.cursor() as cur:
            cur.execute(
                """SELECT m.payload, s.attempts
                     FROM pepsi.state s, pepsi.message_row(s.id) m
                    WHERE s.id = %s AND s.status = 'running'
                      FOR UPDATE OF s""",
                (msg_id,),
            )
            row = cur.fetchone()
            if row is None:
                raise NotRunning(f"message {msg_id} is not running")
            payload, attempts = bytes(row[0]), row[1]
            cur.execute(
                "UPDATE pepsi.message SET headers = headers || jsonb_build_object(%s::text, 'python')"
                " WHERE id = %s",
                (stage, msg_id),
            )
            if payload == b"":
                cur.execute("SELECT pepsi.fail(%s, %s)", (msg_id, "empty payload"))
            elif payload == b"retry" and attempts == 1:
                cur.execute("SELECT pepsi.pause(%s, interval '1 second')", (msg_id,))
            elif next_stage:
                cur.execute("SELECT pepsi.advance(%s, %s)", (msg_id, next_stage))
            else:
                cur.execute("SELECT pepsi.finish(%s)", (msg_id,))


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
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0  # EOF
        try:
            msg_id = int(line)
        except ValueError:
            log("bad message id", repr(line))
            out.write("1 # bad message id\n")
            out.flush()
            continue
        try:
            handle(conn, stage, args.next, msg_id)
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
