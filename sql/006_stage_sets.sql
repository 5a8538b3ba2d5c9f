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

CREATE OR REPLACE FUNCTION pepsi.armed() RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT coalesce((SELECT bool_or(armed) FROM pepsi.wake), true) $$;

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

-- The fence: the first statement of every transaction in which a
-- dispatcher writes the queue. It fails unless the dispatcher's lock
-- session still lives: that session holds the dispatcher's token lock
-- (p_token, a bigint advisory lock no other session takes), so a
-- transaction of another session can take it shared only once the lock
-- session is gone. And it takes each owned stage's fence lock shared for
-- the transaction: a dispatcher taking a stage over takes that lock
-- exclusive once, after the stage's own lock, so it waits for every
-- transaction of the old owner that passed the fence before it resets the
-- stage's running rows. A dispatcher whose lock session was terminated
-- (or that was frozen while its standby took over) thus writes nothing
-- more. Costs one function call and a few lock-table entries per
-- transaction; no row is read or written.
CREATE FUNCTION pepsi.fence(p_token bigint, p_stages text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1885696102, hashtext(s)) FROM unnest(p_stages) s;  -- 'pepf'
    IF pg_try_advisory_xact_lock_shared(p_token) THEN
        RAISE EXCEPTION 'pepsi.fence: this dispatcher''s lock session is gone: it owns no stage'
            USING ERRCODE = '55P03';  -- lock_not_available
    END IF;
END $$;
