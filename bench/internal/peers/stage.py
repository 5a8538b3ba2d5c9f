#!/usr/bin/python3
"""bench/peers/stage.py: contrib/python/stage.py with the real work of
bench/peers' real-work pipelines in place of its header.

Each message is one transaction (psycopg2's implicit BEGIN, each statement
its own round trip): lock the queue row as contrib's stage does (SELECT ...
FOR UPDATE), UPDATE acct SET n = n + 1 WHERE id = id % 10000 + 1, then
pepsi.advance (--next) or pepsi.finish, COMMIT; "0" on the status line.

With --one-trip, a pass is one round trip, as contrib/python/onetrip.py and
pepsi-worker(7) EXAMPLES do it: autocommit, and one cur.execute of the
UPDATE and the move as one two-statement string, which PostgreSQL runs as
one transaction (a move refused, 55000, rolls the UPDATE back).

bench/peers writes it out (it is embedded in the binary) and runs it with a
python3 that has psycopg2.
"""

import argparse
import os
import sys

import psycopg2

NOT_RUN = 75


def log(*args):
    print("peers stage.py:", *args, file=sys.stderr, flush=True)


class NotRunning(Exception):
    pass


def handle(conn, next_stage, msg_id):
    with conn:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT s.attempts FROM pepsi.state s WHERE s.id = %s AND s.status = 'running' FOR UPDATE OF s",
                (msg_id,),
            )
            if cur.fetchone() is None:
                raise NotRunning(f"message {msg_id} is not running")
            cur.execute("UPDATE acct SET n = n + 1 WHERE id = %s", (msg_id % 10000 + 1,))
            if next_stage:
                cur.execute("SELECT pepsi.advance(%s, %s)", (msg_id, next_stage))
            else:
                cur.execute("SELECT pepsi.finish(%s)", (msg_id,))


def one_trip(next_stage):
    move = "SELECT pepsi.advance(%(id)s, %(next)s)" if next_stage else "SELECT pepsi.finish(%(id)s)"
    query = "UPDATE acct SET n = n + 1 WHERE id = %(acct)s;" + move

    def handle_one(conn, next_stage, msg_id):
        with conn.cursor() as cur:
            cur.execute(query, {"id": msg_id, "acct": msg_id % 10000 + 1, "next": next_stage})

    return handle_one


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-c", metavar="CONFIG_FILE")
    ap.add_argument("--next", default="")
    ap.add_argument("--one-trip", action="store_true")
    args = ap.parse_args()
    dsn, stage = os.environ.get("PEPSI_DSN"), os.environ.get("PEPSI_STAGE", "")
    if not dsn:
        log("PEPSI_DSN must be set")
        return 2
    try:
        conn = psycopg2.connect(dsn, application_name="peers stage.py " + stage)
    except psycopg2.Error as e:
        log("connect:", str(e).strip())
        return NOT_RUN
    work = handle
    if args.one_trip:
        conn.autocommit = True  # no BEGIN of the driver's: the string is the transaction
        work = one_trip(args.next)
    out = sys.stdout
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        msg_id = int(line)
        try:
            work(conn, args.next, msg_id)
            out.write("0\n")
        except (NotRunning, psycopg2.Error) as e:
            reason = " ".join(str(e).split())
            if conn.closed:
                out.write(f"{NOT_RUN} # database connection lost: {reason}\n")
                out.flush()
                return NOT_RUN
            log(f"message {msg_id}: {reason}")
            out.write(f"1 # {reason}\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
