-- pepsi schema, version 9: finished messages out of the hot table.
--
-- pepsi.state becomes a table partitioned by status:
--
--   pepsi.state_live    pending, running, paused: the table as it was, with
--                       its indexes; the claim, the settle and the sweeps
--                       work here, and it holds only unfinished rows;
--   pepsi.state_failed  failed (kept until retried or purged);
--   pepsi.state_done    done, partitioned by updated_at (when the message
--                       became done) into ranges the janitor creates ahead
--                       (pepsi.done_ahead) and drops whole once RETENTION
--                       has passed (pepsi.expire_done), and a default
--                       partition for what no range holds (RETENTION = 0,
--                       or a janitor that was away), expired row by row.
--
-- A row that becomes done or failed moves out of state_live (an UPDATE
-- through pepsi.state moves it), so state_live's size and the claim's cost
-- do not depend on how many messages passed, and retention costs a DROP
-- per range instead of a DELETE and a VACUUM per row. Readers and writers
-- keep using pepsi.state; only writers that need state_live's own indexes
-- (the claim by ctid, ingress with ON CONFLICT on state_dedup) name it.
--
-- On a populated database this moves the finished rows out (an INSERT and
-- a DELETE of each) and checks the unfinished ones (one scan): seconds on
-- a million rows. The done rows moved go to the default partition, where
-- each is deleted RETENTION after it was done, as before.

LOCK TABLE pepsi.state IN ACCESS EXCLUSIVE MODE;

-- 1. The table as it is becomes state_live. The ingress trigger an
-- earlier pepsi made on it goes (the ingress triggers of both tables are
-- made after the migrations: sql/functions/20_ingress.sql).
DROP TRIGGER IF EXISTS state_ingress ON pepsi.state;
DROP INDEX pepsi.state_failed;
ALTER TABLE pepsi.state RENAME TO state_live;
ALTER TABLE pepsi.state_live RENAME CONSTRAINT state_pkey TO state_live_pkey;

-- 2. The partitioned table, its columns in state_live's order.
CREATE TABLE pepsi.state (LIKE pepsi.state_live INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY LIST (status);

CREATE TABLE pepsi.state_failed PARTITION OF pepsi.state (PRIMARY KEY (id)) FOR VALUES IN ('failed');

CREATE TABLE pepsi.state_done PARTITION OF pepsi.state FOR VALUES IN ('done')
    PARTITION BY RANGE (updated_at);
CREATE INDEX state_done_id ON pepsi.state_done (id);
CREATE TABLE pepsi.state_done_default PARTITION OF pepsi.state_done DEFAULT;

-- A range of state_done is named state_done_FROM_TO, its bounds in Unix
-- seconds: what pepsi.done_ahead creates and pepsi.expire_done reads. The
-- first ones are created by the dispatcher that sweeps retention; until
-- then done rows go to the default partition.

-- 3. The finished rows move out; the rest is attached as state_live.
INSERT INTO pepsi.state SELECT * FROM pepsi.state_live WHERE status IN ('done', 'failed');
DELETE FROM pepsi.state_live WHERE status IN ('done', 'failed');
ALTER TABLE pepsi.state ATTACH PARTITION pepsi.state_live FOR VALUES IN ('pending', 'running', 'paused');

-- 4. Ingress: a statement that inserts into pepsi.state or straight into
-- state_live (the SQL API and COPY ingress do) wakes an armed dispatcher;
-- pepsi.enqueue and pepsi.enqueue_key write to state_live; a message
-- whose queue row goes with its range is deleted by pepsi.expire_done
-- itself (pepsi.message_deleted skips the cascade then). These functions
-- and the triggers were made here; they are in sql/functions now.
--
-- 5. Retention: pepsi.done_ahead creates the ranges of state_done ahead,
-- pepsi.expire_done expires them (sql/functions/20_done_partitions.sql).
