#!/usr/bin/python3
"""contrib/python/onetrip.py — a pepsi stage in Python, one round trip a pass.

Each pass sends its work and its move as one query string of two
statements: PostgreSQL runs such a string as one transaction of its own,
so the work and the move commit together, and a move that raises (SQLSTATE
55000: the message is no longer running) rolls the work back. The work here
adds the header STAGE = "onetrip" to the message; then the message advances
to the stage given by --next, or finishes when there is none.

When the dispatcher speaks protocol 2 or later (PEPSI_PROTOCOL), the
program first writes "hello token"; then an id line may carry its pass's
token ("ID TOKEN"), which the move presents as its last argument: the
server refuses the move of a pass the dispatcher gave up (timed out, claimed
again since), and the work with it. A bare id's move gets NULL.

See pepsi-worker(7), EXAMPLES. psycopg2 sends a query with its parameters
in place as one string (Debian: apt-get install python3-psycopg2).
"""

import argparse
import os
import sys

import psycopg2

# The status (and exit status) that says the database, not the message,
# failed: the dispatcher puts the message back (pepsi-worker(7)).
NOT_RUN = 75


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-c", metavar="CONFIG_FILE")  # passed by pepsi; unused
    ap.add_argument("--next", default="")
    args = ap.parse_args()
    stage = os.environ.get("PEPSI_STAGE", "")
    try:
        conn = psycopg2.connect(os.environ["PEPSI_DSN"], application_name="onetrip.py " + stage)
    except (KeyError, psycopg2.Error) as e:
        print("onetrip.py: connect:", e, file=sys.stderr, flush=True)
        return NOT_RUN
    conn.autocommit = True  # no BEGIN of the driver's: the string is the transaction
    move = "SELECT pepsi.advance(%(id)s, %(next)s, %(pass)s)" if args.next else "SELECT pepsi.finish(%(id)s, %(pass)s)"
    query = ("UPDATE pepsi.message SET headers = headers || jsonb_build_object(%(stage)s::text, 'onetrip')"
             " WHERE id = %(id)s;" + move)
    cur = conn.cursor()
    try:
        if int(os.environ.get("PEPSI_PROTOCOL", "")) >= 2:
            print("hello token", flush=True)  # first: ask for pass tokens
    except ValueError:
        pass
    for line in sys.stdin:
        try:
            fields = [int(f) for f in line.split()]  # "ID" or "ID TOKEN"
            if not 1 <= len(fields) <= 2 or min(fields) <= 0:
                raise ValueError
        except ValueError:
            print("onetrip.py: not an id line:", line.strip(), file=sys.stderr, flush=True)
            return 1
        mid, token = fields[0], (fields[1] if len(fields) == 2 else None)
        try:
            cur.execute(query, {"id": mid, "stage": stage, "next": args.next, "pass": token})
        except psycopg2.Error as e:
            # Not psycopg2.OperationalError alone: it is also the class of
            # SQLSTATE 55000, a move refused (the pass is over).
            if conn.closed:
                print(f"{NOT_RUN} # {str(e).splitlines()[0] if str(e) else 'connection lost'}", flush=True)
                return NOT_RUN
            print("1 #", str(e).splitlines()[0], flush=True)
            continue
        print("0", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
