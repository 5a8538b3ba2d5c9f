-- pepsi schema, version 26: graphs (issue 50): children, joins, results.
--
-- A stage may spawn children of the message it holds (pepsi.spawn,
-- pepsi.spawn_many) and move it to wait at a join stage (pepsi.join): the
-- parent waits there, status 'waiting', until every child has ended (done,
-- failed or cancelled), and then goes on as pending at that stage. The
-- dispatcher counts the ends in the settle it already sends
-- (pepsi.joins, sql/functions/30_graph.sql): a child's end never touches
-- its parent's row in the child stage's transaction.
--
--   parent  the message that spawned this one; NULL for a message enqueued
--   result  what the stage that finished it left (pepsi.finish's p_result):
--           at most 64 KiB, read by the join (pepsi.children)
--
-- 'waiting' is a live status: state_live's list of values grows by it.
-- The partition is detached and attached again; a validated CHECK that
-- says the same as the new bound spares the attach its scan of the table.
--
-- dispatch_stats counts the joins: parents released at their join stage
-- (joined), and parents failed there because a child failed (join_failed:
-- failed messages that no pass failed, so the rows' failed count is
-- failed + join_failed).
--
-- Cost when no graph is used: two NULL columns (no rewrite), and partial
-- indexes that hold no entry.
ALTER TABLE pepsi.state
    ADD COLUMN parent bigint,
    ADD COLUMN result bytea;

ALTER TABLE pepsi.state_live
    ADD CONSTRAINT state_live_waiting CHECK (status IN ('pending', 'running', 'paused', 'held', 'waiting'));
ALTER TABLE pepsi.state DETACH PARTITION pepsi.state_live;
ALTER TABLE pepsi.state ATTACH PARTITION pepsi.state_live FOR VALUES IN ('pending', 'running', 'paused', 'held', 'waiting');
ALTER TABLE pepsi.state_live DROP CONSTRAINT state_live_waiting;

-- A message's children in spawn order, in every partition (the join's
-- read, a cancel's cascade, the open-children check, a page of children);
-- done partitions made later get it too.
CREATE INDEX state_parent ON pepsi.state (parent, id) WHERE parent IS NOT NULL;

-- A waiting message keeps its deduplication key, as any unfinished one.
DROP INDEX pepsi.state_dedup;
CREATE UNIQUE INDEX state_dedup ON pepsi.state_live (dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'paused', 'held', 'waiting');

-- The parents waiting at a join (the dispatcher's sweep, the overview).
CREATE INDEX state_waiting ON pepsi.state_live (stage, id) WHERE status = 'waiting';

ALTER TABLE pepsi.dispatch_stats
    ADD COLUMN joined bigint NOT NULL DEFAULT 0,
    ADD COLUMN join_failed bigint NOT NULL DEFAULT 0;
