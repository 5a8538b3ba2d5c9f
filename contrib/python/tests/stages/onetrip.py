#!/usr/bin/env python3
"""A one-trip stage for the package's tests: the header STAGE = "onetrip"
queued with the move, each pass one round trip; an id divisible by 5 fails."""

from pepsi_stage import Fail, Finish, Message, Move, run_one_trip


def stage(m: Message) -> Move:
    m.queue(
        "UPDATE pepsi.message SET headers = headers || jsonb_build_object(%s::text, 'onetrip') WHERE id = %s",
        (m.stage, m.id),
    )
    if m.id % 5 == 0:
        m.queue("SELECT 1/0")  # fails the pass, its header rolled back
    return Finish()


if __name__ == "__main__":
    run_one_trip(stage)
