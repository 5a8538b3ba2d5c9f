-- pepsi schema, version 21: cancelled, a status of its own (issue 54).
--
-- A cancel (pepsi queue cancel, pepsi.cancel(), the dashboard) made its
-- messages failed, so the operator's own decision was counted, charted and
-- grouped as the stages' failures. A cancelled message now has the status
-- 'cancelled', in a partition of its own beside state_failed, kept like a
-- failed one until it is retried or purged. The cancels made before are
-- recognised by the error every cancel wrote ("cancelled by USER") and
-- become cancelled.
--
-- The statistics count the passes a cancel cut short: a running message
-- cancelled with --force has its pass's outcome ignored, and that pass is
-- counted cancelled (dispatch_stats, and its stage's stage_stats) rather
-- than as a message failed, processed or failed by its stage.
--
-- Cost: an empty partition, the cancelled failed rows moved into it (an
-- INSERT and a DELETE of each; failed rows are few), and two columns with
-- a constant default (no rewrite). The CREATE and the moves lock
-- pepsi.state briefly.
CREATE TABLE pepsi.state_cancelled PARTITION OF pepsi.state (PRIMARY KEY (id)) FOR VALUES IN ('cancelled');

UPDATE pepsi.state SET status = 'cancelled' WHERE status = 'failed' AND error LIKE 'cancelled by %';

ALTER TABLE pepsi.dispatch_stats ADD COLUMN cancelled bigint NOT NULL DEFAULT 0;
ALTER TABLE pepsi.stage_stats ADD COLUMN cancelled bigint NOT NULL DEFAULT 0;
