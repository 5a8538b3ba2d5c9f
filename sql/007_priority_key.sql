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

-- pepsi.enqueue_key is ingress with the answer whether the message is new:
-- with a key held by an unfinished message it creates nothing and returns
-- that message's id with created = false. Concurrent producers racing on
-- one key end with exactly one message: the state row goes in first, by
-- ON CONFLICT on state_dedup (which waits for a racing insert to commit or
-- roll back), and its message row only when it went in. A loser looks the
-- winner up; should the winner have finished in between, it tries again.
CREATE FUNCTION pepsi.enqueue_key(p_stage text, p_payload bytea, p_headers jsonb,
                                  p_priority integer, p_key text,
                                  OUT id bigint, OUT created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_try integer := 0;
BEGIN
    IF p_stage IS NULL OR p_stage = '' THEN
        RAISE EXCEPTION 'pepsi.enqueue: stage must not be empty' USING ERRCODE = '22023';
    END IF;
    IF p_key = '' THEN
        RAISE EXCEPTION 'pepsi.enqueue: key must not be empty (NULL for none)' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NULL THEN
        WITH m AS (
            INSERT INTO pepsi.message (headers, payload)
            VALUES (coalesce(p_headers, '{}'), coalesce(p_payload, ''))
            RETURNING message.id
        )
        INSERT INTO pepsi.state (id, stage, priority) SELECT m.id, p_stage, coalesce(p_priority, 0) FROM m
        RETURNING state.id INTO id;
        created := true;
        RETURN;
    END IF;
    LOOP
        SELECT s.id INTO id FROM pepsi.state s
         WHERE s.dedup_key = p_key AND s.status IN ('pending', 'running', 'paused');
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
        id := nextval('pepsi.message_id_seq'::regclass);
        INSERT INTO pepsi.state (id, stage, priority, dedup_key)
        VALUES (id, p_stage, coalesce(p_priority, 0), p_key)
        ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'paused')
        DO NOTHING;
        IF FOUND THEN
            INSERT INTO pepsi.message (id, headers, payload)
            VALUES (id, coalesce(p_headers, '{}'), coalesce(p_payload, ''));
            created := true;
            RETURN;
        END IF;
        v_try := v_try + 1;
        IF v_try >= 100 THEN
            RAISE EXCEPTION 'pepsi.enqueue: key % keeps changing hands', p_key USING ERRCODE = '40001';
        END IF;
    END LOOP;
END $$;

-- pepsi.enqueue keeps its one-statement path for messages without a key
-- (the outbox's hot path: pepsi bench's ingress step measures it).
DROP FUNCTION pepsi.enqueue(text, bytea, jsonb);
CREATE FUNCTION pepsi.enqueue(p_stage text, p_payload bytea DEFAULT '', p_headers jsonb DEFAULT '{}',
                              p_priority integer DEFAULT 0, p_key text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    IF p_key IS NOT NULL THEN
        SELECT k.id INTO v_id FROM pepsi.enqueue_key(p_stage, p_payload, p_headers, p_priority, p_key) k;
        RETURN v_id;
    END IF;
    IF p_stage IS NULL OR p_stage = '' THEN
        RAISE EXCEPTION 'pepsi.enqueue: stage must not be empty' USING ERRCODE = '22023';
    END IF;
    WITH m AS (
        INSERT INTO pepsi.message (headers, payload)
        VALUES (coalesce(p_headers, '{}'), coalesce(p_payload, ''))
        RETURNING id
    )
    INSERT INTO pepsi.state (id, stage, priority) SELECT id, p_stage, coalesce(p_priority, 0) FROM m
    RETURNING id INTO v_id;
    RETURN v_id;
END $$;
