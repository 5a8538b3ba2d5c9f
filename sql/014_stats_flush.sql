-- pepsi schema, version 14: a statistics write is applied at most once.
--
-- A dispatcher adds its deltas to pepsi.stage_stats and
-- pepsi.dispatch_stats in one transaction. When the connection broke at
-- its COMMIT (a server crash, a failover) the dispatcher could not know
-- whether it was applied, and wrote the deltas again: counted twice. Now
-- each write carries the dispatcher's token (random for each run) and a
-- sequence number, and is applied only if pepsi.stats_flush shows an
-- earlier one for its writer; a write sent again is skipped if it was
-- applied.
--
-- Cost: a new table of one row per dispatcher set.
CREATE TABLE pepsi.stats_flush (
    dispatcher text PRIMARY KEY,
    token      bigint NOT NULL,
    seq        bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
