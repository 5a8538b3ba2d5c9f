#!/usr/bin/python3
"""contrib/python/onetrip.py — a pepsi stage in Python, one round trip a pass.

Each pass sends its work and its move as one query string of two
statements: PostgreSQL runs such a string as one transaction of its own,
so the work and the move commit together, and a move that raises (SQLSTATE
55000: the message is no longer running) rolls the work back. The work here
adds the header STAGE = "onetrip" to the message; then the message advances
to the stage given by --next, or finishes when there is none.

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
    move = "SELECT pepsi.advance(%(id)s, %(next)s)" if args.next else "SELECT pepsi.finish(%(id)s)"
    query = ("UPDATE pepsi.message SET headers = headers || jsonb_build_object(%(stage)s::text, 'onetrip')"
             " WHERE id = %(id)s;" + move)
    cur = conn.cursor()
    for line in sys.stdin:
        try:
            mid = int(line)
        except ValueError:
            print("onetrip.py: not an id:", line.strip(), file=sys.stderr, flush=True)
            return 1
        try:
            cur.execute(query, {"id": mid, "stage": stage, "next": args.next})
        except psycopg2.OperationalError as e:
            print(f"{NOT_RUN} # {str(e).splitlines()[0] if str(e) else 'connection lost'}", flush=True)
            return NOT_RUN
        except psycopg2.Error as e:
            print("1 #", str(e).splitlines()[0], flush=True)
            continue
        print("0", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
