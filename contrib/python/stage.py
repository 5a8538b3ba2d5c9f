#!/usr/bin/env python3
"""contrib/python/stage.py — an example pepsi stage program in Python, on
the package pepsi-stage (contrib/python, import pepsi_stage).

It does exactly what contrib/go/stage and contrib/shell/stage.sh do:
  - adds the header STAGE = "python" to the message (work in its transaction);
  - fails an empty payload: "empty payload";
  - pauses the payload "retry" for a second on its first attempt at a stage;
  - otherwise advances the message to the stage given by --next, or
    finishes it when there is none.

Install the package in a virtualenv that sees the distribution's psycopg2
(Debian: apt-get install python3-psycopg2; see contrib/python/README.md):

    python3 -m venv --system-site-packages /opt/pepsi-stage
    /opt/pepsi-stage/bin/python -m pip install --no-build-isolation --no-index ./contrib/python

and name that interpreter in pepsi.conf:

    [stage-parse]
    PROGRAM = /opt/pepsi-stage/bin/python /usr/local/lib/pepsi/stage.py --next deliver

pepsi_stage.run does the protocol (pepsi-worker(7)): the -c argument, one
connection, a transaction per message, the move, the pass token, the
status line, 75 on a lost connection, SIGTERM.
"""

import argparse

from pepsi_stage import Advance, Cursor, Fail, Finish, Message, Move, Pause, run

ap = argparse.ArgumentParser(description="example pepsi stage")
ap.add_argument("--next", metavar="STAGE", default="", help="advance messages to STAGE (default: finish them)")
args, _ = ap.parse_known_args()  # -c CONFIG_FILE is run's


def stage(m: Message, cur: Cursor) -> Move:
    # Its result is not needed: it goes out with the move and COMMIT, in
    # one round trip. Should it fail, the pass is rolled back and the
    # message fails with its error. (cur.execute runs a statement at once.)
    m.queue(
        "UPDATE pepsi.message SET headers = headers || jsonb_build_object(%s::text, 'python') WHERE id = %s",
        (m.stage, m.id),
    )
    if not m.payload:
        return Fail("empty payload")
    if m.payload == b"retry" and m.attempts == 1:
        return Pause(1)
    if args.next:
        return Advance(args.next)
    return Finish()


if __name__ == "__main__":
    run(stage)
