-- Ingress from SQL, inside any application transaction: pepsi.enqueue()
-- and pepsi.enqueue_key().
--
-- pepsi.enqueue() without a deduplication key (the outbox's hot path)
-- inserts one row into
-- pepsi.ingress, a heap without indexes, which a dispatcher admits into
-- pepsi.message and pepsi.state_live at each of its polls (pepsi.admit(),
-- 20_admit.sql). Its id is drawn from pepsi.message's sequence, so the
-- ingress order is that of the calls. It notifies, after the row, only
-- while a dispatcher is armed (10_wake.sql).
--
-- A message with a key, and a scheduled one, go straight to the queue:
-- pepsi.enqueue_key().
--
-- A scheduled message (p_run_at, or p_delay from now) waits as paused
-- until then, its timeout the time it runs, as a retry waits: the
-- dispatcher resumes it when it falls due, and sleeps until the earliest
-- (pkg/dispatch: nextPaused). It notifies whether or not a dispatcher is
-- armed: a dispatcher that is busy polls for pending messages only, and
-- would learn of it at its next wake, which may be a POLL_INTERVAL away.
-- So scheduling costs a producer's commit the notification lock that the
-- plain enqueue avoids. A time that is not in the future runs now; a
-- negative delay, or both, is an error. It has no flow key (KEY) until it
-- falls due: it takes its key's place then, not from its enqueue, so that
-- a message scheduled for tomorrow does not hold back its key's messages
-- of today (the resume gives it its key: pkg/queue's resumeSQL).
--
-- The signature grew p_run_at and p_delay (schema 17): the old one is
-- dropped here, in the install's transaction, so that producers never
-- find the function missing.
DROP FUNCTION IF EXISTS pepsi.enqueue(text, bytea, jsonb, integer, text);
DROP FUNCTION IF EXISTS pepsi.enqueue_key(text, bytea, jsonb, integer, text);

-- pepsi.run_at() is when a message enqueued with p_run_at or p_delay
-- runs: NULL for now. A time after the year 9999 is refused
-- (pepsi.check_time).
CREATE OR REPLACE FUNCTION pepsi.run_at(p_fn text, p_run_at timestamptz, p_delay interval) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_run_at IS NOT NULL AND p_delay IS NOT NULL THEN
        RAISE EXCEPTION '%: give p_run_at or p_delay, not both', p_fn USING ERRCODE = '22023';
    END IF;
    IF p_delay < interval '0' THEN
        RAISE EXCEPTION '%: the delay must be 0 or more, not %', p_fn, p_delay USING ERRCODE = '22023';
    END IF;
    IF p_run_at = 'infinity' OR p_run_at = '-infinity' THEN
        RAISE EXCEPTION '%: run_at % is not a time (hold the message instead)', p_fn, p_run_at USING ERRCODE = '22023';
    END IF;
    IF p_run_at IS NOT NULL THEN
        PERFORM pepsi.check_time(p_fn, 'p_run_at', p_run_at, NULL);
    ELSIF p_delay IS NOT NULL THEN
        PERFORM pepsi.check_time(p_fn, 'p_delay', NULL, p_delay);
    END IF;
    p_run_at := coalesce(p_run_at, now() + p_delay);
    IF p_run_at <= now() THEN
        RETURN NULL;
    END IF;
    RETURN p_run_at;
END $$;

CREATE OR REPLACE FUNCTION pepsi.enqueue(p_stage text, p_payload bytea DEFAULT '', p_headers jsonb DEFAULT '{}',
                                         p_priority integer DEFAULT 0, p_key text DEFAULT NULL,
                                         p_run_at timestamptz DEFAULT NULL, p_delay interval DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    IF p_key IS NOT NULL OR p_run_at IS NOT NULL OR p_delay IS NOT NULL THEN
        SELECT k.id INTO v_id FROM pepsi.enqueue_key(p_stage, p_payload, p_headers, p_priority, p_key,
                                                     pepsi.run_at('pepsi.enqueue', p_run_at, p_delay)) k;
        RETURN v_id;
    END IF;
    IF pepsi.stage_ok(p_stage) IS NOT TRUE THEN
        PERFORM pepsi.check_stage('pepsi.enqueue', p_stage);
    END IF;
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

-- pepsi.enqueue_key is ingress with the answer whether the message is new:
-- with a key held by an unfinished message (pending, running, paused or
-- held) it creates nothing and returns that message's id with created = false.
-- Concurrent producers racing on one key end with exactly one message: the
-- queue row goes into pepsi.state_live first, by ON CONFLICT on
-- state_dedup (which waits for a racing insert to commit or roll back),
-- and its message row only when it went in. A loser looks the winner up;
-- should the winner have finished in between, it tries again. A row's
-- flow_key is the value of its stage's KEY header (pepsi.flow_keys),
-- through pepsi.flow_key(). The ingress trigger of pepsi.state_live
-- (20_ingress.sql) wakes an armed dispatcher. With p_run_at in the future
-- the message is scheduled (see above): paused until then, without a flow
-- key, and any dispatcher is woken.
CREATE OR REPLACE FUNCTION pepsi.enqueue_key(p_stage text, p_payload bytea, p_headers jsonb,
                                             p_priority integer, p_key text, p_run_at timestamptz DEFAULT NULL,
                                             OUT id bigint, OUT created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_try integer := 0;
BEGIN
    IF p_run_at IS NOT NULL THEN
        p_run_at := pepsi.run_at('pepsi.enqueue', p_run_at, NULL);
    END IF;
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
        INSERT INTO pepsi.state_live (id, stage, priority, flow_key, status, timeout)
        SELECT m.id, p_stage, coalesce(p_priority, 0), CASE WHEN coalesce(p_headers, '{}') = '{}' OR p_run_at IS NOT NULL THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT pepsi.flow_key(p_headers ->> k.header) FROM pepsi.flow_keys k WHERE k.stage = p_stage) END,
             CASE WHEN p_run_at IS NULL THEN 'pending' ELSE 'paused' END, p_run_at FROM m
        RETURNING state_live.id INTO id;
        created := true;
        IF p_run_at IS NOT NULL THEN
            PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
        END IF;
        RETURN;
    END IF;
    LOOP
        SELECT s.id INTO id FROM pepsi.state_live s
         WHERE s.dedup_key = p_key AND s.status IN ('pending', 'running', 'paused', 'held', 'waiting');
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
        id := nextval('pepsi.message_id_seq'::regclass);
        INSERT INTO pepsi.state_live (id, stage, priority, dedup_key, flow_key, status, timeout)
        VALUES (id, p_stage, coalesce(p_priority, 0), p_key, CASE WHEN coalesce(p_headers, '{}') = '{}' OR p_run_at IS NOT NULL THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT pepsi.flow_key(p_headers ->> k.header) FROM pepsi.flow_keys k WHERE k.stage = p_stage) END,
             CASE WHEN p_run_at IS NULL THEN 'pending' ELSE 'paused' END, p_run_at)
        ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'paused', 'held', 'waiting')
        DO NOTHING;
        IF FOUND THEN
            INSERT INTO pepsi.message (id, headers, payload)
            VALUES (id, coalesce(p_headers, '{}'), coalesce(p_payload, ''));
            created := true;
            IF p_run_at IS NOT NULL THEN
                PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
            END IF;
            RETURN;
        END IF;
        v_try := v_try + 1;
        IF v_try >= 100 THEN
            RAISE EXCEPTION 'pepsi.enqueue: key % keeps changing hands', p_key USING ERRCODE = '40001';
        END IF;
    END LOOP;
END $$;
