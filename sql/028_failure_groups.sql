-- pepsi schema, version 28: the failure groups without grouping every
-- failed message (issue 54).
--
-- The dashboard's /failures grouped every failed message by stage and
-- reason on each view: 100 000 of them at 5 million messages a day, 61 ms
-- with the tables' statistics and 440 ms without (a sort on disk). Now
-- the groups' counts are kept, and only the failed messages' own
-- transitions keep them:
--
-- * pepsi.failure_delta gets a row (+1, -1) for each message that enters
--   or leaves pepsi.state_failed, or changes its stage or its errors
--   there, written by row triggers on that partition alone
--   (functions/20_failure_groups.sql): a pass that ends ok, or any move
--   of a message that is not failed, writes nothing. Inserts only, so
--   that messages failing at once with one reason never wait for each
--   other's row lock.
-- * pepsi.failure_groups holds the sums: the janitor's vacuum check folds
--   the deltas into it (pepsi.fold_failures()), in one statement, every
--   VACUUM_INTERVAL. A group's count is its row here plus its deltas not
--   yet folded.
--
-- When the groups' newest messages failed, and which they are, is read
-- per group from state_failed_group_at; a group's messages in id order
-- (the dashboard's list of a group, a retry or purge of one) from
-- state_failed_group. Both index the reason as pkg/admin's reasonSQL
-- writes it (the expression must be the same, character for character);
-- state_failed_group_at in the "C" collation (the same equality), so that
-- each statement has one index that fits it: without the tables'
-- statistics the planner took either for either, and read a whole group
-- through the one in the wrong order. The reason leads, not the stage: a
-- list of one stage's failed messages, which the stage alone filters,
-- took a stage-led index for a few rows and sorted a third of the failed
-- ones (59 ms at 100 000), where the primary key's order reads 51. That
-- list has its own index, state_failed_stage, in its order: without
-- statistics the planner read every failed message for it and sorted
-- them (28 to 66 ms at 100 000).
--
-- Cost: for each message that fails (a few in a hundred), one row in
-- failure_delta and three index entries, two of them with the regular
-- expression of its reason; none for the others. The CREATEs read
-- state_failed once and block writes to it (messages failing) meanwhile;
-- the triggers' install counts its messages into failure_groups.
CREATE TABLE pepsi.failure_groups (
    stage  text NOT NULL,
    reason text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (stage, reason)
);

CREATE TABLE pepsi.failure_delta (
    stage  text NOT NULL,
    reason text NOT NULL,
    n      integer NOT NULL
);

CREATE INDEX state_failed_group ON pepsi.state_failed
    (regexp_replace(substr(coalesce(nullif(error, ''), nullif(dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g'), stage, id);
CREATE INDEX state_failed_group_at ON pepsi.state_failed
    ((regexp_replace(substr(coalesce(nullif(error, ''), nullif(dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g') COLLATE "C"), stage, updated_at, id);
CREATE INDEX state_failed_stage ON pepsi.state_failed (stage, id);
