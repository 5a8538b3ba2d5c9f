"""bench/peers/kitstage.py: the real work of bench/peers' pipelines as a
stage on the package pepsi-stage (contrib/python), written as README's
"Writing a stage" (contrib/python/stage.py) shows it: UPDATE acct SET n =
n + 1 WHERE id = id % 10000 + 1 queued in the pass's transaction, sent
with the move (--next STAGE, or finish) and COMMIT.

bench/peers writes it out (it is embedded in the binary) and runs it with
the python of a virtualenv that has the package installed.
"""

import argparse

from pepsi_stage import Advance, Cursor, Finish, Message, Move, run

ap = argparse.ArgumentParser()
ap.add_argument("--next", default="")
args, _ = ap.parse_known_args()  # -c CONFIG is run's
MOVE = Advance(args.next) if args.next else Finish()


def stage(m: Message, cur: Cursor) -> Move:
    # Its result is not needed: it goes out with the move and COMMIT, in
    # one round trip, as contrib/python/stage.py does it.
    m.queue("UPDATE acct SET n = n + 1 WHERE id = %s", (m.id % 10000 + 1,))
    return MOVE


if __name__ == "__main__":
    run(stage)
