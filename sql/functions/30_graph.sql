-- Graphs (schema 26): a stage spawns children of the message it holds and
-- moves it to wait at a join stage; the parent goes on there once every
-- child has ended.
--
-- Who writes what:
--   - the parent's stage, in its own transaction: the children
--     (pepsi.spawn, pepsi.spawn_many) and the parent's move to 'waiting'
--     (pepsi.join, or "0 join STAGE" on its status line);
--   - a child's stage: the child's own move only; its end never touches
--     the parent's row, so thousands of children ending together queue
--     behind nothing;
--   - the dispatcher, after the settle that booked a child's end (or its
--     parent's move to the join), in the same transaction: pepsi.joins(),
--     which releases each waiting parent that has no open child left, or
--     fails it as soon as a child failed (JOIN_POLICY = fail).
-- A child is open while it is live (pending, running, paused, held or
-- itself waiting); its retries run before it counts as failed.
--
-- The depth bound: a child at most pepsi.spawn_depth() (16) levels below
-- the message first enqueued, so that a stage that spawns from each of its
-- own children cannot grow a tree without end.

-- pepsi.spawn_depth() is how many levels of children a message may have
-- below it.
CREATE OR REPLACE FUNCTION pepsi.spawn_depth() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 16 $$;

-- pepsi.spawn_parent checks that p_parent may have children now: it is
-- running (the pass p_pass, when given) and not spawn_depth() levels deep.
-- It takes a share lock on the parent's row, so that a cancel of the parent
-- waits for the children to commit and cancels them too.
CREATE OR REPLACE FUNCTION pepsi.spawn_parent(p_fn text, p_parent bigint, p_stage text, p_pass bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_depth integer;
BEGIN
    IF pepsi.stage_ok(p_stage) IS NOT TRUE THEN
        PERFORM pepsi.check_stage(p_fn, p_stage);
    END IF;
    PERFORM FROM pepsi.state_live s
      WHERE s.id = p_parent AND s.status = 'running' AND (p_pass IS NULL OR s.pass = p_pass)
      FOR SHARE;
    IF NOT FOUND THEN
        PERFORM pepsi.not_running(p_fn, p_parent, p_pass);
    END IF;
    WITH RECURSIVE up (id, n) AS (
        SELECT s.parent, 1 FROM pepsi.state_live s WHERE s.id = p_parent AND s.parent IS NOT NULL
        UNION ALL
        SELECT s.parent, u.n + 1 FROM up u JOIN pepsi.state s ON s.id = u.id
         WHERE s.parent IS NOT NULL AND u.n <= pepsi.spawn_depth()
    )
    SELECT max(n) INTO v_depth FROM up;
    IF coalesce(v_depth, 0) >= pepsi.spawn_depth() THEN
        RAISE EXCEPTION '%: message % is % levels deep: children may be at most % levels below the message enqueued',
            p_fn, p_parent, v_depth, pepsi.spawn_depth() USING ERRCODE = '54001';
    END IF;
END $$;

-- pepsi.trace_headers() is p_headers for a child of p_parent: a child
-- that brings no traceparent of its own gets its parent's traceparent and
-- tracestate, so that its passes are traced in its parent's trace.
CREATE OR REPLACE FUNCTION pepsi.trace_headers(p_parent bigint, p_headers jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN coalesce(p_headers, '{}') ? 'traceparent' THEN coalesce(p_headers, '{}')
                ELSE coalesce(p_headers, '{}') || coalesce((
                     SELECT jsonb_strip_nulls(jsonb_build_object('traceparent', m.headers -> 'traceparent',
                                                                 'tracestate', m.headers -> 'tracestate'))
                       FROM pepsi.message m WHERE m.id = p_parent AND m.headers ? 'traceparent'), '{}') END
$$;

-- pepsi.spawn() makes one child of the running message p_parent, pending
-- at p_stage, and returns its id. The child has its own payload, headers,
-- priority and deduplication key (a key an unfinished message holds
-- raises 23505; one committed meanwhile, state_dedup's own error). It is
-- visible to the dispatcher when the stage's transaction commits, with the
-- parent's move.
CREATE OR REPLACE FUNCTION pepsi.spawn(p_parent bigint, p_stage text, p_payload bytea DEFAULT '\x',
                                       p_headers jsonb DEFAULT '{}', p_priority integer DEFAULT 0,
                                       p_key text DEFAULT NULL, p_pass bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM pepsi.spawn_parent('pepsi.spawn', p_parent, p_stage, p_pass);
    IF p_key = '' THEN
        RAISE EXCEPTION 'pepsi.spawn: key must not be empty (NULL for none)' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_key) > 1024 THEN
        RAISE EXCEPTION 'pepsi.spawn: key of % bytes: want at most 1024', octet_length(p_key) USING ERRCODE = '22023';
    END IF;
    IF p_key IS NOT NULL AND EXISTS (SELECT FROM pepsi.state_live s WHERE s.dedup_key = p_key
                                       AND s.status IN ('pending', 'running', 'paused', 'held', 'waiting')) THEN
        RAISE EXCEPTION 'pepsi.spawn: message %: key % is held by an unfinished message', p_parent, p_key
            USING ERRCODE = '23505';
    END IF;
    p_headers := pepsi.trace_headers(p_parent, p_headers);
    v_id := nextval('pepsi.message_id_seq'::regclass);
    INSERT INTO pepsi.message (id, headers, payload)
    VALUES (v_id, coalesce(p_headers, '{}'), coalesce(p_payload, ''));
    INSERT INTO pepsi.state_live (id, stage, priority, dedup_key, flow_key, parent)
    VALUES (v_id, p_stage, coalesce(p_priority, 0), p_key,
            CASE WHEN coalesce(p_headers, '{}') <> '{}'
                 THEN (SELECT pepsi.flow_key(p_headers ->> k.header) FROM pepsi.flow_keys k WHERE k.stage = p_stage) END,
            p_parent);
    RETURN v_id;
END $$;

-- pepsi.spawn_many() makes one child of p_parent per element of
-- p_payloads, all pending at p_stage with the same headers and priority,
-- in one statement, and returns how many; an empty array makes none. A
-- query's rows become children with ARRAY(SELECT payload FROM ...), or
-- with pepsi.spawn() called once per row.
CREATE OR REPLACE FUNCTION pepsi.spawn_many(p_parent bigint, p_stage text, p_payloads bytea[],
                                            p_headers jsonb DEFAULT '{}', p_priority integer DEFAULT 0,
                                            p_pass bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
    v_key text;
BEGIN
    PERFORM pepsi.spawn_parent('pepsi.spawn_many', p_parent, p_stage, p_pass);
    IF coalesce(cardinality(p_payloads), 0) = 0 THEN
        RETURN 0;
    END IF;
    p_headers := pepsi.trace_headers(p_parent, p_headers);
    IF coalesce(p_headers, '{}') <> '{}' THEN
        SELECT pepsi.flow_key(p_headers ->> k.header) INTO v_key FROM pepsi.flow_keys k WHERE k.stage = p_stage;
    END IF;
    WITH c AS (
        SELECT nextval('pepsi.message_id_seq'::regclass) AS id, coalesce(p.payload, '') AS payload
          FROM unnest(p_payloads) AS p(payload)
    ), m AS (
        INSERT INTO pepsi.message (id, headers, payload)
        SELECT c.id, coalesce(p_headers, '{}'), c.payload FROM c
    )
    INSERT INTO pepsi.state_live (id, stage, priority, flow_key, parent)
    SELECT c.id, p_stage, coalesce(p_priority, 0), v_key, p_parent FROM c;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- pepsi.join() moves the running message p_id to wait at the join stage
-- p_stage until every child it has spawned has ended; the dispatcher
-- releases it there as pending (at once when none is open), or fails it
-- (JOIN_POLICY = fail, the default, when a child failed). The pass is
-- booked requeued, as an advance.
CREATE OR REPLACE FUNCTION pepsi.join(p_id bigint, p_stage text, p_pass bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pepsi.stage_ok(p_stage) IS NOT TRUE THEN
        PERFORM pepsi.check_stage('pepsi.join', p_stage);
    END IF;
    UPDATE pepsi.state_live s SET status = 'waiting', stage = p_stage, timeout = NULL, attempts = 0, updated_at = now(),
           flow_key = CASE WHEN EXISTS (SELECT FROM pepsi.flow_keys) THEN
                          (SELECT pepsi.flow_key(m.headers ->> k.header) FROM pepsi.flow_keys k, pepsi.message m
                            WHERE m.id = s.id AND k.stage = p_stage) END
     WHERE s.id = p_id AND s.status = 'running' AND (p_pass IS NULL OR s.pass = p_pass);
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.join', p_id, p_pass);
    END IF;
END $$;

-- pepsi.cancel_tree() cancels the unfinished descendants of p_ids (live
-- rows, found through their parents), running ones included: the message
-- that would have used their work is over. Their passes are booked
-- cancelled, as pepsi.cancel's with p_running. It returns how many.
CREATE OR REPLACE FUNCTION pepsi.cancel_tree(p_ids bigint[], p_reason text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pepsi.state_live c WHERE c.parent = ANY (p_ids)) THEN
        RETURN 0;
    END IF;
    WITH RECURSIVE tree (id, n) AS (
        SELECT c.id, 1 FROM pepsi.state_live c WHERE c.parent = ANY (p_ids)
        UNION ALL
        SELECT c.id, t.n + 1 FROM tree t JOIN pepsi.state_live c ON c.parent = t.id WHERE t.n <= pepsi.spawn_depth()
    )
    UPDATE pepsi.state s SET status = 'cancelled', error = p_reason, timeout = NULL, updated_at = now(),
                           ended = CASE WHEN s.status = 'running' THEN s.pass ELSE s.ended END,
                           ended_as = CASE WHEN s.status = 'running' THEN 'c' ELSE s.ended_as END
      FROM (SELECT DISTINCT id FROM tree) t
     WHERE s.id = t.id AND s.status IN ('pending', 'running', 'paused', 'held', 'waiting');
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- pepsi.joins() settles the joins of the messages p_ids: each that waits
-- at a join, its own pass settled (handed IS NULL), is
--   - failed, when its join stage is not one of p_all (JOIN_POLICY = all)
--     and a child of it failed; its unfinished descendants are cancelled,
--     and its own parent's join is settled in turn;
--   - released, pending at its join stage, when no child is open.
-- p_all NULL fails nobody (the SQL API's callers, which do not know the
-- policies: the dispatcher's next sweep applies them). The waiting rows
-- are locked in id order before they are read again in a statement of
-- their own, so that two callers ending a parent's last two children
-- together cannot both see the other's child open. It returns the rows
-- it released (failed false) and failed (true), and wakes the
-- dispatchers when it released any.
DROP FUNCTION IF EXISTS pepsi.joins(bigint[], text[]);
CREATE OR REPLACE FUNCTION pepsi.joins(p_ids bigint[], p_all text[] DEFAULT NULL)
RETURNS TABLE (id bigint, stage text, failed boolean) LANGUAGE plpgsql AS $$
DECLARE
    v_ids    bigint[] := p_ids;
    v_locked bigint[];
    v_failed bigint[];
    v_n      bigint := 0;
    v_level  integer;
BEGIN
    FOR v_level IN 0 .. pepsi.spawn_depth() LOOP
        EXIT WHEN coalesce(cardinality(v_ids), 0) = 0;
        -- Only a parent with at most one child open as this statement sees
        -- it (the other may be ending in a transaction not yet committed),
        -- or with a failed child where that fails it, is locked and read
        -- again: one with more has a join no end settles yet, and a row
        -- lock per settle of a wide fan-out would be a write per settle.
        -- Three callers ending a parent's last three children at once could
        -- each see two open; the janitor's sweep settles that join.
        SELECT array_agg(w.id) INTO v_locked FROM (
            SELECT s.id FROM pepsi.state_live s
             WHERE s.id = ANY (ARRAY(
                       SELECT c.id FROM pepsi.state_live c
                        WHERE c.id = ANY (v_ids) AND c.status = 'waiting' AND c.handed IS NULL
                          AND ((SELECT count(*) FROM (SELECT FROM pepsi.state_live o WHERE o.parent = c.id LIMIT 2) o) < 2
                               OR p_all IS NOT NULL AND NOT (c.stage = ANY (p_all))
                                  AND EXISTS (SELECT FROM pepsi.state_failed f WHERE f.parent = c.id))))
               AND s.status = 'waiting' AND s.handed IS NULL
             ORDER BY s.id FOR UPDATE) w;
        EXIT WHEN v_locked IS NULL;
        v_failed := NULL;
        IF p_all IS NOT NULL THEN
            WITH bad AS (
                SELECT s.id, c.id AS child, left(coalesce(c.error, c.dispatch_error, ''), 1000) AS why
                  FROM pepsi.state_live s
                 CROSS JOIN LATERAL (SELECT c.id, c.error, c.dispatch_error FROM pepsi.state_failed c
                                      WHERE c.parent = s.id ORDER BY c.id LIMIT 1) c
                 WHERE s.id = ANY (v_locked) AND s.status = 'waiting' AND NOT (s.stage = ANY (p_all))
            ), f AS (
                UPDATE pepsi.state s SET status = 'failed', updated_at = now(), timeout = NULL,
                       error = 'child ' || b.child || ' failed' || CASE WHEN b.why = '' THEN '' ELSE ': ' || b.why END
                  FROM bad b
                 WHERE s.id = b.id AND s.status = 'waiting'
                RETURNING s.id
            )
            SELECT array_agg(f.id) INTO v_failed FROM f;
            RETURN QUERY SELECT s.id, s.stage, true FROM pepsi.state_failed s WHERE s.id = ANY (v_failed);
        END IF;
        IF v_failed IS NOT NULL THEN
            PERFORM pepsi.cancel_tree(v_failed, 'cancelled: its parent failed');
        END IF;
        RETURN QUERY
        UPDATE pepsi.state_live s SET status = 'pending', updated_at = now()
         WHERE s.id = ANY (v_locked) AND s.status = 'waiting'
           AND NOT EXISTS (SELECT FROM pepsi.state_live c WHERE c.parent = s.id)
        RETURNING s.id, s.stage, false;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        IF v_n > 0 AND pepsi.armed() THEN
            PERFORM pg_notify(x.ingress_channel, '') FROM pepsi.settings x;
        END IF;
        EXIT WHEN v_failed IS NULL;
        -- A parent that failed has ended: its own parent's join is next.
        SELECT array_agg(DISTINCT s.parent) INTO v_ids FROM pepsi.state_failed s
         WHERE s.id = ANY (v_failed) AND s.parent IS NOT NULL;
    END LOOP;
END $$;

-- pepsi.children() lists the children of p_parent, in the order they were
-- spawned: their stage and status, the error of a failed or cancelled
-- one, and the result its stage left when it finished it. It is the join
-- stage's read of its fan-out.
CREATE OR REPLACE FUNCTION pepsi.children(p_parent bigint)
RETURNS TABLE (id bigint, stage text, status text, error text, result bytea, updated_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT s.id, s.stage, s.status,
           CASE WHEN s.status IN ('failed', 'cancelled') THEN coalesce(s.error, s.dispatch_error) END,
           s.result, s.updated_at
      FROM pepsi.state s
     WHERE s.parent = p_parent
     ORDER BY s.id
$$;
