-- Per-key flow control (KEY, KEY_LIMIT in [stage-NAME]).
--
-- pepsi.flow_keys holds the keyed stages: a stage's dispatcher writes its
-- own rows at start (pepsi dispatch; nothing else writes them). A row's
-- flow_key is its key at its stage: the value of that stage's KEY header,
-- set when the row becomes pending there (pepsi.enqueue, COPY ingress, the
-- dispatcher's settle and resets, pepsi queue retry) and kept while it
-- runs or is paused there; NULL at a stage without KEY, or when the message
-- has no such header (no key, no limit). Those writers read pepsi.flow_keys
-- in their own transaction, so a dispatcher that changes it (under ACCESS
-- EXCLUSIVE) and then re-keys its stages' rows misses none.
--
-- state_flow answers the claim's question "is there an earlier pending or
-- paused message of this key at this stage?" with one probe. Only keyed
-- rows are in it; the column is catalog-only and the index starts empty,
-- so neither rewrites a populated table.
ALTER TABLE pepsi.state ADD COLUMN flow_key text;

CREATE TABLE pepsi.flow_keys (
    stage     text PRIMARY KEY,
    header    text NOT NULL,
    key_limit integer NOT NULL CHECK (key_limit >= 1)
);

CREATE INDEX state_flow ON pepsi.state (stage, flow_key, id)
    WHERE flow_key IS NOT NULL AND status IN ('pending', 'paused');

CREATE OR REPLACE FUNCTION pepsi.enqueue_key(p_stage text, p_payload bytea, p_headers jsonb,
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
        INSERT INTO pepsi.state (id, stage, priority, flow_key)
        SELECT m.id, p_stage, coalesce(p_priority, 0), CASE WHEN coalesce(p_headers, '{}') = '{}' THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT p_headers ->> k.header FROM pepsi.flow_keys k WHERE k.stage = p_stage) END FROM m
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
        INSERT INTO pepsi.state (id, stage, priority, dedup_key, flow_key)
        VALUES (id, p_stage, coalesce(p_priority, 0), p_key, CASE WHEN coalesce(p_headers, '{}') = '{}' THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT p_headers ->> k.header FROM pepsi.flow_keys k WHERE k.stage = p_stage) END)
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

CREATE OR REPLACE FUNCTION pepsi.enqueue(p_stage text, p_payload bytea DEFAULT '', p_headers jsonb DEFAULT '{}',
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
    INSERT INTO pepsi.state (id, stage, priority, flow_key)
    SELECT id, p_stage, coalesce(p_priority, 0), CASE WHEN coalesce(p_headers, '{}') = '{}' THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT p_headers ->> k.header FROM pepsi.flow_keys k WHERE k.stage = p_stage) END FROM m
    RETURNING id INTO v_id;
    RETURN v_id;
END $$;
