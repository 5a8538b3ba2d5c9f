-- pepsi schema, version 6: several dispatchers share one database, each
-- owning a set of stages (pepsi dispatch --stages, STAGES).
--
-- Cost: pepsi.state gets a column without a default (a change of the
-- catalog only: no row is rewritten), and none of the other tables grows
-- with the messages, so on a database of 1 000 000 messages this runs in
-- milliseconds, as on an empty one (TestMigrateStageSets with
-- PEPSI_TEST_MIGRATE_ROWS=1000000): the statistics tables
-- hold one row per stage (and per dispatcher set), the wake table one per
-- set. Stop every dispatcher before migrating (an older dispatcher writes
-- the wake flag as one row and would fail on the new table).

-- handed: the stage a running row was claimed at (the claim sets it, the
-- settle clears it). A running row belongs to the dispatcher that handed it
-- out, the owner of that stage, even after its stage program advanced it
-- into another set's stage (pepsi.advance keeps it running there until
-- its dispatcher requeues it): resets, sweeps and the retry guard go by
-- coalesce(handed, stage). Rows running when this is applied have none,
-- and go by their stage, as before.
ALTER TABLE pepsi.state ADD COLUMN handed text;

-- The wake flag, one row per dispatcher set (its key: the stage set's
-- name, "*" for a dispatcher that owns every stage): a producer must
-- notify while ANY dispatcher waits for a notification. The trigger's WHEN
-- reads every row (a handful, in one page): as cheap as the one-row
-- lookup before. An empty table reads as armed, as before (a crash empties
-- it: producers notify until a dispatcher says otherwise).
DROP TABLE pepsi.wake;
CREATE UNLOGGED TABLE pepsi.wake (
    dispatcher text PRIMARY KEY,
    armed      boolean NOT NULL DEFAULT true
);

-- (pepsi.armed() read it so here; sql/functions/10_wake.sql has it now.)

-- Statistics: one row per stage and writer, and one global row per
-- writer, so that every row keeps a single writer (the dispatcher that
-- owns that set, or its standby after a takeover). Readers add the rows
-- up. The rows there are now were written by the one dispatcher of the
-- old days, which owned every stage: "*".
ALTER TABLE pepsi.stage_stats ADD COLUMN dispatcher text NOT NULL DEFAULT '*';
ALTER TABLE pepsi.stage_stats DROP CONSTRAINT stage_stats_pkey;
ALTER TABLE pepsi.stage_stats ADD PRIMARY KEY (stage, dispatcher);

ALTER TABLE pepsi.dispatch_stats ADD COLUMN dispatcher text NOT NULL DEFAULT '*';
ALTER TABLE pepsi.dispatch_stats DROP CONSTRAINT dispatch_stats_pkey;
ALTER TABLE pepsi.dispatch_stats DROP COLUMN one;
ALTER TABLE pepsi.dispatch_stats ADD PRIMARY KEY (dispatcher);

-- The fence, pepsi.fence(), that every transaction in which a dispatcher
-- writes the queue begins with, was made here; it is in
-- sql/functions/20_fence.sql now.
