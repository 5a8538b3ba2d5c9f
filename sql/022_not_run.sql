-- pepsi schema, version 22: a stage's answers 75 counted (issue 47).
--
-- A stage that answers 75 (EX_TEMPFAIL: it could not reach its database,
-- so the message was not run) puts its message back, paused a second, with
-- nothing counted against it: not an attempt, not a processed or failed
-- pass. One that answers 75 for ever was invisible. Now the dispatcher
-- counts these answers per stage, as it counts the others, and flushes
-- them with its other deltas:
--   - not_run, the answers 75 (a worker's exit 75 counts one, for the
--     message at the head of its pipeline);
--   - recent_not_run and recent_passes, the not_run and the passes
--     (processed, failed, timeouts and crashes) of the writer's latest
--     write that counted anything at the stage, which updated_at dates:
--     pepsi doctor and the dashboard warn when a stage's recent answers
--     are mostly 75 (pkg/queue's NotRunStages).
--
-- Cost: three columns with a constant default (no rewrite).
ALTER TABLE pepsi.stage_stats
    ADD COLUMN not_run bigint NOT NULL DEFAULT 0,
    ADD COLUMN recent_not_run bigint NOT NULL DEFAULT 0,
    ADD COLUMN recent_passes bigint NOT NULL DEFAULT 0;
