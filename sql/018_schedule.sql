-- pepsi schema, version 18: periodic enqueue ([schedule-NAME] in
-- pepsi.conf, issue 37 part 5).
--
-- The dispatcher that holds the janitor lock enqueues one message at each
-- slot of each schedule, with the deduplication key
-- schedule:NAME:UNIX-SECONDS. The key alone does not make a slot go once:
-- it is free again as soon as its message is done or failed, and a
-- dispatcher that takes the janitor role over (a standby, another stage
-- set, a restart) must know which slots went before. So each schedule has
-- a row here, and a slot is enqueued only in the transaction that moves
-- last_slot forward to it (an UPDATE that waits for a racing one and then
-- finds the slot taken): at most once per slot whatever runs it, and only
-- the latest of the slots missed while no janitor ran.
--
-- since is when a dispatcher first saw the schedule: a new schedule
-- starts with its next slot, not with one from before it existed.
-- Rows of schedules no longer in pepsi.conf are left alone (a schedule
-- that comes back goes on from its last slot).
--
-- Cost: a new table of one row per schedule, written once per slot.
CREATE TABLE pepsi.schedule (
    name      text PRIMARY KEY,
    since     timestamptz NOT NULL,
    last_slot timestamptz,        -- the latest slot enqueued; NULL: none yet
    last_id   bigint,             -- its message
    last_at   timestamptz         -- when it was enqueued
);
