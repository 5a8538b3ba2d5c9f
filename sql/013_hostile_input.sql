-- pepsi schema, version 13: one bad message costs one message.
--
-- Keys. A message's key at a stage with KEY is the value of a header, and
-- it goes into the index state_flow, whose entries PostgreSQL limits to
-- about 2.7 kB: one longer value failed every claim and every admission.
-- pepsi.flow_key() is the key a header value gives: the value itself up
-- to 256 bytes, else 'md5:' and the MD5 of the value, so a long key (a
-- JWT, a URL) still keeps its messages in order and apart from the
-- others. Every writer of state.flow_key goes through it.
--
-- Stage names. The SQL API takes the names the rest of pepsi takes (1 to
-- 63 bytes of letters, digits, '_', '-' and '.'; protocol.CheckStage): a
-- message at a stage no section can name could never be claimed.
--
-- pepsi.pause() refuses a NULL or negative delay (it spun the message at
-- once, pass after pass).
--
-- A paused row keeps the stage it was handed at (handed) until the
-- dispatcher has settled that pass, and is not resumed before: a pause of
-- no delay resumed and claimed again before its pass's answer was settled
-- was judged by that settle as a pass that did not move its message.
--
-- Cost: functions, and the paused rows of an earlier dispatcher's passes
-- made resumable (one UPDATE of the paused rows).

CREATE FUNCTION pepsi.flow_key(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(p_value) <= 256 THEN p_value ELSE 'md5:' || md5(p_value) END
$$;

CREATE FUNCTION pepsi.check_stage(p_fn text, p_stage text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_stage IS NULL OR p_stage = '' THEN
        RAISE EXCEPTION '%: stage must not be empty', p_fn USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_stage) > 63 OR p_stage !~ '^[A-Za-z0-9_.-]+$' THEN
        RAISE EXCEPTION '%: stage "%" is not a stage name: want 1 to 63 letters, digits, ''_'', ''-'' or ''.''',
            p_fn, left(p_stage, 80) USING ERRCODE = '22023';
    END IF;
END $$;

UPDATE pepsi.state SET flow_key = pepsi.flow_key(flow_key) WHERE octet_length(flow_key) > 256;
UPDATE pepsi.state SET handed = NULL WHERE status = 'paused' AND handed IS NOT NULL;

CREATE OR REPLACE FUNCTION pepsi.pause(p_id bigint, p_delay interval) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_delay IS NULL OR p_delay < interval '0' THEN
        RAISE EXCEPTION 'pepsi.pause: message %: the delay must be 0 or more, not %', p_id, coalesce(p_delay::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    UPDATE pepsi.state SET status = 'paused', timeout = now() + p_delay, updated_at = now()
     WHERE id = p_id AND status = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pepsi.pause: message % is not running', p_id USING ERRCODE = '55000';
    END IF;
END $$;

CREATE OR REPLACE FUNCTION pepsi.advance(p_id bigint, p_stage text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pepsi.check_stage('pepsi.advance', p_stage);
    UPDATE pepsi.state SET stage = p_stage, updated_at = now()
     WHERE id = p_id AND status = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pepsi.advance: message % is not running', p_id USING ERRCODE = '55000';
    END IF;
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
    PERFORM pepsi.check_stage('pepsi.enqueue', p_stage);
    INSERT INTO pepsi.ingress (stage, priority, headers, payload)
    VALUES (p_stage, coalesce(p_priority, 0), coalesce(p_headers, '{}'), coalesce(p_payload, ''))
    RETURNING id INTO v_id;
    -- After the row: the dispatcher's arming waits out every transaction
    -- that wrote before it armed (see pkg/dispatch/wake.go).
    IF pepsi.armed() THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    END IF;
    RETURN v_id;
END $$;

CREATE OR REPLACE FUNCTION pepsi.enqueue_key(p_stage text, p_payload bytea, p_headers jsonb,
                                             p_priority integer, p_key text,
                                             OUT id bigint, OUT created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_try integer := 0;
BEGIN
    PERFORM pepsi.check_stage('pepsi.enqueue', p_stage);
    IF p_key = '' THEN
        RAISE EXCEPTION 'pepsi.enqueue: key must not be empty (NULL for none)' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_key) > 1024 THEN
        RAISE EXCEPTION 'pepsi.enqueue: key of % bytes: want at most 1024', octet_length(p_key) USING ERRCODE = '22023';
    END IF;
    IF p_key IS NULL THEN
        WITH m AS (
            INSERT INTO pepsi.message (headers, payload)
            VALUES (coalesce(p_headers, '{}'), coalesce(p_payload, ''))
            RETURNING message.id
        )
        INSERT INTO pepsi.state_live (id, stage, priority, flow_key)
        SELECT m.id, p_stage, coalesce(p_priority, 0), CASE WHEN coalesce(p_headers, '{}') = '{}' THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT pepsi.flow_key(p_headers ->> k.header) FROM pepsi.flow_keys k WHERE k.stage = p_stage) END FROM m
        RETURNING state_live.id INTO id;
        created := true;
        RETURN;
    END IF;
    LOOP
        SELECT s.id INTO id FROM pepsi.state_live s
         WHERE s.dedup_key = p_key AND s.status IN ('pending', 'running', 'paused');
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
        id := nextval('pepsi.message_id_seq'::regclass);
        INSERT INTO pepsi.state_live (id, stage, priority, dedup_key, flow_key)
        VALUES (id, p_stage, coalesce(p_priority, 0), p_key, CASE WHEN coalesce(p_headers, '{}') = '{}' THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT pepsi.flow_key(p_headers ->> k.header) FROM pepsi.flow_keys k WHERE k.stage = p_stage) END)
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

CREATE OR REPLACE FUNCTION pepsi.admit(p_limit integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pepsi.ingress) THEN
        RETURN 0;
    END IF;
    WITH i AS (
        DELETE FROM pepsi.ingress
         WHERE ctid = ANY (ARRAY(SELECT ctid FROM pepsi.ingress LIMIT p_limit FOR UPDATE SKIP LOCKED))
        RETURNING id, created_at, stage, priority, headers, payload
    ), m AS (
        INSERT INTO pepsi.message (id, created_at, headers, payload)
        SELECT id, created_at, headers, payload FROM i
    )
    INSERT INTO pepsi.state_live (id, stage, priority, flow_key, updated_at)
    SELECT i.id, i.stage, i.priority,
           CASE WHEN i.headers = '{}' THEN NULL
                ELSE (SELECT pepsi.flow_key(i.headers ->> k.header) FROM pepsi.flow_keys k WHERE k.stage = i.stage) END,
           i.created_at
      FROM i;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;
