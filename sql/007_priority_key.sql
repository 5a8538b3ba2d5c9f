-- pepsi schema, version 7: priorities and deduplicated ingress.
--
-- Cost: two columns with constant defaults (a change of the catalog only:
-- no row is rewritten), the pending index rebuilt over the pending rows and
-- a new partial index over the unfinished rows with a key (none yet, but
-- the build reads the table once): on a database of 1 000 000 messages a
-- few seconds (TestMigratePriorityKey with PEPSI_TEST_MIGRATE_ROWS=1000000
-- prints it). Stop every dispatcher before migrating.

-- priority: within a stage lower is claimed first, ingress (id) order
-- within a priority. It stays with the message through every stage.
-- dedup_key: while a message with a key is unfinished (pending, running or
-- paused), enqueueing another with the same key returns the first.
ALTER TABLE pepsi.state ADD COLUMN priority integer NOT NULL DEFAULT 0,
                        ADD COLUMN dedup_key text;

-- The claim walks a stage's pending rows in (priority, id) order; with
-- every priority 0 that is the id order of before, at the cost of four
-- bytes per entry.
DROP INDEX pepsi.state_pending;
CREATE INDEX state_pending ON pepsi.state (stage, priority, id) INCLUDE (updated_at)
    WHERE status = 'pending';

-- At most one unfinished message per key: the arbiter of pepsi.enqueue's
-- ON CONFLICT. A row leaves the index as it is done or failed.
CREATE UNIQUE INDEX state_dedup ON pepsi.state (dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'paused');

-- pepsi.enqueue_key (ingress with the answer whether the message is new)
-- and pepsi.enqueue with a priority and a key were made here; they are in
-- sql/functions/20_enqueue.sql now. The pepsi.enqueue of three arguments
-- they replaced goes here: CREATE OR REPLACE cannot change a function's
-- arguments, and the new one would stand beside it.
DROP FUNCTION IF EXISTS pepsi.enqueue(text, bytea, jsonb);
