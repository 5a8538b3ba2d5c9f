-- pepsi schema, version 27: the dashboard's throughput charts survive a
-- restart of pepsi httpd (issue 54).
--
-- pepsi httpd samples the statistics' totals (pepsi.stage_stats, per
-- stage) every few seconds for its charts, and kept them in memory only:
-- a restart emptied the charts for their whole window. Now it also writes
-- one sample a bar (a minute, by default) here, and reads the last
-- window's back when it starts. Each write deletes the samples older than
-- an hour (or two windows). Several servers may write: a sample is a
-- total at a moment, and the charts take the rates between any two.
--
-- Cost: a new table of a row per stage and minute for the last hour,
-- written once a minute by each pepsi httpd; nothing else reads or writes
-- it.
CREATE TABLE pepsi.throughput (
    at        timestamptz NOT NULL,
    stage     text NOT NULL,
    processed bigint NOT NULL, -- stage_stats.processed: passes that ended ok
    failed    bigint NOT NULL, -- failed answers, timeouts and crashes
    PRIMARY KEY (at, stage)
);
