-- pepsi schema, version 2: count the done messages the retention sweep deletes,
-- so that dispatch_stats.done - expired keeps agreeing with the rows.
ALTER TABLE pepsi.dispatch_stats ADD COLUMN expired bigint NOT NULL DEFAULT 0;
