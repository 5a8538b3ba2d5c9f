-- The schema pepsi of a freshly migrated database (sql/NNN_*.sql, then
-- sql/functions/*.sql), as pg_dump --schema-only of PostgreSQL 15 prints
-- it, less its SET lines and owners.
--
-- Generated: do not edit. Change the migrations or the functions, then run
-- make schema; TestSchemaFile (pkg/queue) fails while this file differs.

-- SCHEMA pepsi
CREATE SCHEMA pepsi;

-- FUNCTION admit(integer)
CREATE FUNCTION pepsi.admit(p_limit integer) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION advance(bigint, text, bigint)
CREATE FUNCTION pepsi.advance(p_id bigint, p_stage text, p_pass bigint DEFAULT NULL::bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF pepsi.stage_ok(p_stage) IS NOT TRUE THEN
        PERFORM pepsi.check_stage('pepsi.advance', p_stage);
    END IF;
    UPDATE pepsi.state_live s
       SET stage = p_stage, status = 'pending', attempts = 0, handed = NULL, updated_at = now(),
           ended = s.pass, ended_as = 'q',
           flow_key = CASE WHEN EXISTS (SELECT FROM pepsi.flow_keys) THEN
                          (SELECT pepsi.flow_key(m.headers ->> k.header) FROM pepsi.flow_keys k, pepsi.message m
                            WHERE m.id = s.id AND k.stage = p_stage) END
     WHERE s.id = p_id AND s.status = 'running' AND (p_pass IS NULL OR s.pass = p_pass)
       AND p_stage <> coalesce(s.handed, s.stage);
    IF NOT FOUND THEN
        -- Not running (that pass), or an advance to its own stage: no move.
        UPDATE pepsi.state_live s SET updated_at = now()
         WHERE s.id = p_id AND s.status = 'running' AND (p_pass IS NULL OR s.pass = p_pass);
    END IF;
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.advance', p_id, p_pass);
    END IF;
END $$;

-- FUNCTION arm(text, boolean)
CREATE FUNCTION pepsi.arm(p_set text, p_on boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    LOCK TABLE pepsi.wake IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO pepsi.wake (dispatcher, armed) VALUES (p_set, p_on)
        ON CONFLICT (dispatcher) DO UPDATE SET armed = excluded.armed WHERE pepsi.wake.armed <> excluded.armed;
    PERFORM setval('pepsi.wake_armed', (SELECT count(*) FROM pepsi.wake WHERE armed), true);
END $$;

-- FUNCTION armed()
CREATE FUNCTION pepsi.armed() RETURNS boolean
    LANGUAGE sql
    AS $$ SELECT coalesce(pg_sequence_last_value('pepsi.wake_armed'), 1) <> 0 $$;

-- FUNCTION cancel(bigint[], text, boolean)
CREATE FUNCTION pepsi.cancel(p_ids bigint[], p_by text DEFAULT SESSION_USER, p_running boolean DEFAULT false) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n       bigint;
    v_ids     bigint[];
    v_parents bigint[];
BEGIN
    PERFORM pepsi.check_text('pepsi.cancel', 'p_by', p_by, 255);
    WITH c AS (
        UPDATE pepsi.state SET status = 'cancelled', error = 'cancelled by ' || coalesce(nullif(p_by, ''), session_user),
                               timeout = NULL, updated_at = now(),
                               ended = CASE WHEN status = 'running' THEN pass ELSE ended END,
                               ended_as = CASE WHEN status = 'running' THEN 'c' ELSE ended_as END
         WHERE id = ANY (p_ids) AND (status IN ('pending', 'paused', 'held', 'waiting') OR p_running AND status = 'running')
        RETURNING id, parent
    )
    SELECT count(*), array_agg(c.id), array_agg(DISTINCT c.parent) FILTER (WHERE c.parent IS NOT NULL)
      INTO v_n, v_ids, v_parents FROM c;
    IF v_n > 0 THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
        -- Graphs (sql/functions/30_graph.sql): the unfinished children of a
        -- cancelled message go with it; a cancelled child has ended, and may
        -- be the last its parent's join waited for.
        PERFORM pepsi.cancel_tree(v_ids, 'cancelled: its parent was cancelled');
        IF v_parents IS NOT NULL THEN
            PERFORM pepsi.joins(v_parents);
        END IF;
    END IF;
    RETURN v_n;
END $$;

-- FUNCTION cancel_tree(bigint[], text)
CREATE FUNCTION pepsi.cancel_tree(p_ids bigint[], p_reason text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION check_stage(text, text)
CREATE FUNCTION pepsi.check_stage(p_fn text, p_stage text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_stage IS NULL OR p_stage = '' THEN
        RAISE EXCEPTION '%: stage must not be empty', p_fn USING ERRCODE = '22023';
    END IF;
    IF NOT pepsi.stage_ok(p_stage) THEN
        RAISE EXCEPTION '%: stage "%" is not a stage name: want 1 to 63 letters, digits, ''_'', ''-'' or ''.''',
            p_fn, left(p_stage, 80) USING ERRCODE = '22023';
    END IF;
END $$;

-- FUNCTION check_text(text, text, text, integer)
CREATE FUNCTION pepsi.check_text(p_fn text, p_arg text, p_value text, p_max integer) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF octet_length(p_value) > p_max THEN
        RAISE EXCEPTION '%: % of % bytes: want at most %', p_fn, p_arg, octet_length(p_value), p_max
            USING ERRCODE = '22023';
    END IF;
END $$;

-- FUNCTION check_time(text, text, timestamp with time zone, interval)
CREATE FUNCTION pepsi.check_time(p_fn text, p_arg text, p_at timestamp with time zone, p_delay interval) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF p_delay IS NOT NULL THEN
        -- least(): now() + a longer delay could be past what timestamptz holds.
        p_at := now() + least(p_delay, interval '100000 years');
    END IF;
    IF p_at >= timestamptz '10000-01-01 00:00:00+00' THEN
        RAISE EXCEPTION '%: % % % after the year 9999: want a time before 10000-01-01 (hold the message instead)',
            p_fn, p_arg, coalesce(p_delay::text, p_at::text), CASE WHEN p_delay IS NULL THEN 'is' ELSE 'ends' END
            USING ERRCODE = '22008';
    END IF;
END $$;

-- FUNCTION children(bigint)
CREATE FUNCTION pepsi.children(p_parent bigint) RETURNS TABLE(id bigint, stage text, status text, error text, result bytea, updated_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.id, s.stage, s.status,
           CASE WHEN s.status IN ('failed', 'cancelled') THEN coalesce(s.error, s.dispatch_error) END,
           s.result, s.updated_at
      FROM pepsi.state s
     WHERE s.parent = p_parent
     ORDER BY s.id
$$;

-- FUNCTION cut_reason(text)
CREATE FUNCTION pepsi.cut_reason(p_reason text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN length(p_reason) <= 8192 THEN p_reason
                ELSE left(p_reason, 8192) || '… [cut ' || octet_length(p_reason) - octet_length(left(p_reason, 8192)) || ' bytes]' END
$$;

-- FUNCTION done_ahead(interval, integer)
CREATE FUNCTION pepsi.done_ahead(p_width interval, p_ahead integer) RETURNS integer
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_step bigint := greatest(ceil(extract(epoch FROM p_width)), 1);
    v_now  bigint := ceil(extract(epoch FROM clock_timestamp()));
    v_from bigint;
    v_name text;
    v_n    integer := 0;
BEGIN
    SELECT max(split_part(c.relname, '_', 4)::bigint) INTO v_from
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pepsi.state_done'::regclass AND c.relname ~ '^state_done_[0-9]+_[0-9]+$';
    IF v_from IS NULL OR v_from < v_now THEN
        v_from := v_now + 1;
    END IF;
    WHILE v_from < v_now + 1 + p_ahead * v_step LOOP
        v_name := format('state_done_%s_%s', v_from, v_from + v_step);
        -- A lock not had soon (an autovacuum of the default partition, a
        -- reader holding it) or a done row of the default partition in
        -- the range: tried again at the next step.
        BEGIN
            PERFORM set_config('lock_timeout', '1s', true);
            EXECUTE format('CREATE TABLE pepsi.%I PARTITION OF pepsi.state_done FOR VALUES FROM (%L) TO (%L)',
                           v_name, to_timestamp(v_from), to_timestamp(v_from + v_step));
        EXCEPTION WHEN lock_not_available OR check_violation THEN
            RETURN v_n;
        END;
        v_from := v_from + v_step;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END $_$;

-- FUNCTION enqueue(text, bytea, jsonb, integer, text, timestamp with time zone, interval)
CREATE FUNCTION pepsi.enqueue(p_stage text, p_payload bytea DEFAULT '\x'::bytea, p_headers jsonb DEFAULT '{}'::jsonb, p_priority integer DEFAULT 0, p_key text DEFAULT NULL::text, p_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_delay interval DEFAULT NULL::interval) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION enqueue_key(text, bytea, jsonb, integer, text, timestamp with time zone)
CREATE FUNCTION pepsi.enqueue_key(p_stage text, p_payload bytea, p_headers jsonb, p_priority integer, p_key text, p_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, OUT id bigint, OUT created boolean) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION expire_done(interval, text, bigint, integer)
CREATE FUNCTION pepsi.expire_done(p_keep interval, p_part text, p_after bigint, p_batch integer, OUT part text, OUT last bigint, OUT deleted bigint, OUT more boolean) RETURNS record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_name text;
    v_ids  bigint[];
BEGIN
    SELECT c.relname INTO v_name
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pepsi.state_done'::regclass AND c.relname ~ '^state_done_[0-9]+_[0-9]+$'
       AND split_part(c.relname, '_', 4)::bigint <= extract(epoch FROM now() - p_keep)
     ORDER BY split_part(c.relname, '_', 4)::bigint
     LIMIT 1;
    PERFORM set_config('pepsi.expiring', 'on', true);
    part := coalesce(v_name, 'state_done_default');
    IF part IS DISTINCT FROM p_part THEN
        p_after := 0;
    END IF;
    IF v_name IS NOT NULL THEN
        -- A finished child whose parent is unfinished is what a join will
        -- read: it is kept, moved forward out of the range (its updated_at
        -- becomes now), and expires a RETENTION after that.
        EXECUTE format('SELECT array(SELECT c.id FROM pepsi.%I c WHERE c.parent IS NOT NULL
                                       AND EXISTS (SELECT FROM pepsi.state_live p WHERE p.id = c.parent))', v_name)
           INTO v_ids;
        IF cardinality(v_ids) > 0 THEN
            UPDATE pepsi.state SET updated_at = now() WHERE id = ANY (v_ids) AND status = 'done';
        END IF;
        EXECUTE format('SELECT array(SELECT id FROM pepsi.%I WHERE id > $1 ORDER BY id LIMIT $2)', v_name)
           INTO v_ids USING p_after, p_batch;
        DELETE FROM pepsi.message m
         WHERE m.id = ANY (v_ids) AND m.id BETWEEN v_ids[1] AND v_ids[cardinality(v_ids)];
        GET DIAGNOSTICS deleted = ROW_COUNT;
        more := true;
        IF cardinality(v_ids) = p_batch THEN
            last := v_ids[p_batch];
            RETURN;
        END IF;
        -- Dropping a partition takes ACCESS EXCLUSIVE on state_done: not
        -- waited for long, tried again at the next step.
        last := 0;
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            EXECUTE format('DROP TABLE pepsi.%I', v_name);
        EXCEPTION WHEN lock_not_available THEN
            last := coalesce(v_ids[cardinality(v_ids)], p_after);
        END;
        RETURN;
    END IF;
    WITH batch AS (
        SELECT id, updated_at FROM pepsi.state_done_default WHERE id > p_after ORDER BY id LIMIT p_batch
    ), gone AS (
        DELETE FROM pepsi.state_done_default s USING batch b
         WHERE s.id = b.id AND b.updated_at <= now() - p_keep
           AND NOT (s.parent IS NOT NULL AND EXISTS (SELECT FROM pepsi.state_live p WHERE p.id = s.parent))
        RETURNING s.id
    ), msg AS (
        DELETE FROM pepsi.message m USING gone g WHERE m.id = g.id RETURNING m.id
    )
    SELECT (SELECT max(id) FROM batch), (SELECT count(*) FROM msg) INTO last, deleted;
    last := coalesce(last, 0);
    more := last <> 0;
END $_$;

-- FUNCTION fail(bigint, text, bigint)
CREATE FUNCTION pepsi.fail(p_id bigint, p_reason text, p_pass bigint DEFAULT NULL::bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF octet_length(p_reason) > 8192 THEN
        p_reason := pepsi.cut_reason(p_reason);
    END IF;
    UPDATE pepsi.state SET status = 'failed', error = p_reason, updated_at = now()
     WHERE id = p_id AND status = 'running' AND (p_pass IS NULL OR pass = p_pass);
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.fail', p_id, p_pass);
    END IF;
END $$;

-- FUNCTION failure_counted()
CREATE FUNCTION pepsi.failure_counted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO pepsi.failure_delta (stage, reason, n)
        VALUES (OLD.stage, regexp_replace(substr(coalesce(nullif(OLD.error, ''), nullif(OLD.dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g'), -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO pepsi.failure_delta (stage, reason, n)
        VALUES (NEW.stage, regexp_replace(substr(coalesce(nullif(NEW.error, ''), nullif(NEW.dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g'), 1);
    END IF;
    RETURN NULL;
END $$;

-- FUNCTION failures_truncated()
CREATE FUNCTION pepsi.failures_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM pepsi.failure_delta;
    DELETE FROM pepsi.failure_groups;
    RETURN NULL;
END $$;

-- FUNCTION fence(bigint, text[])
CREATE FUNCTION pepsi.fence(p_token bigint, p_stages text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1885696102, hashtext(s)) FROM unnest(p_stages) s;  -- 'pepf'
    IF pg_try_advisory_xact_lock_shared(p_token) THEN
        RAISE EXCEPTION 'pepsi.fence: this dispatcher''s lock session is gone: it owns no stage'
            USING ERRCODE = '55P03';  -- lock_not_available
    END IF;
END $$;

-- FUNCTION finish(bigint, bigint, bytea)
CREATE FUNCTION pepsi.finish(p_id bigint, p_pass bigint DEFAULT NULL::bigint, p_result bytea DEFAULT NULL::bytea) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF octet_length(p_result) > 65536 THEN
        RAISE EXCEPTION 'pepsi.finish: message %: a result of % bytes: want at most 65536', p_id, octet_length(p_result)
            USING ERRCODE = '22023';
    END IF;
    UPDATE pepsi.state SET status = 'done', updated_at = now(), result = p_result
     WHERE id = p_id AND status = 'running' AND (p_pass IS NULL OR pass = p_pass);
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.finish', p_id, p_pass);
    END IF;
END $$;

-- FUNCTION flow_key(text)
CREATE FUNCTION pepsi.flow_key(p_value text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN octet_length(p_value) <= 256 THEN p_value ELSE 'md5:' || md5(p_value) END
$$;

-- FUNCTION fold_failures()
CREATE FUNCTION pepsi.fold_failures() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH d AS (DELETE FROM pepsi.failure_delta RETURNING stage, reason, n),
         s AS (SELECT stage, reason, sum(n) AS n FROM d GROUP BY 1, 2),
         up AS (INSERT INTO pepsi.failure_groups AS g (stage, reason, n)
                SELECT stage, reason, n FROM s
                ON CONFLICT (stage, reason) DO UPDATE SET n = g.n + excluded.n
                RETURNING 1)
    SELECT count(*) INTO v_n FROM up;
    IF v_n > 0 THEN
        DELETE FROM pepsi.failure_groups WHERE n = 0;
    END IF;
    RETURN v_n;
END $$;

-- FUNCTION hold(bigint[])
CREATE FUNCTION pepsi.hold(p_ids bigint[]) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n bigint;
BEGIN
    UPDATE pepsi.state_live SET status = 'held', updated_at = now()
     WHERE id = ANY (p_ids) AND status IN ('pending', 'paused');
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- FUNCTION join(bigint, text, bigint)
CREATE FUNCTION pepsi."join"(p_id bigint, p_stage text, p_pass bigint DEFAULT NULL::bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION joins(bigint[], text[])
CREATE FUNCTION pepsi.joins(p_ids bigint[], p_all text[] DEFAULT NULL::text[]) RETURNS TABLE(id bigint, stage text, failed boolean)
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION message_ahead(bigint, integer)
CREATE FUNCTION pepsi.message_ahead(p_width bigint, p_ahead integer, OUT created integer, OUT seq bigint) RETURNS record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_from bigint;
    v_last bigint;
    v_name text;
BEGIN
    created := 0;
    seq := pg_sequence_last_value('pepsi.message_id_seq');
    seq := coalesce(seq, 0);
    SELECT split_part(c.relname, '_', 3)::bigint,
           split_part(c.relname, '_', 3)::bigint - split_part(c.relname, '_', 2)::bigint
      INTO v_from, v_last
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pepsi.message'::regclass AND c.relname ~ '^message_[0-9]+_[0-9]+$'
     ORDER BY split_part(c.relname, '_', 3)::bigint DESC
     LIMIT 1;
    IF v_last = v_from THEN -- the first range, from MINVALUE: no measure of a width
        v_last := NULL;
    END IF;
    p_width := greatest(coalesce(p_width, v_last, 10000), 1000);
    IF v_from IS NULL OR v_from <= seq THEN
        v_from := seq + p_width;
    END IF;
    WHILE v_from < seq + 1 + p_ahead * p_width LOOP
        v_name := format('message_%s_%s', v_from, v_from + p_width);
        -- A lock not had soon, or a row of the default partition in the
        -- range: tried again at the next step.
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            EXECUTE format('CREATE TABLE pepsi.%I PARTITION OF pepsi.message FOR VALUES FROM (%s) TO (%s)'
                           ' WITH (autovacuum_enabled = false)', v_name, v_from, v_from + p_width);
        EXCEPTION WHEN lock_not_available OR check_violation THEN
            RETURN;
        END;
        v_from := v_from + p_width;
        created := created + 1;
    END LOOP;
END $_$;

-- FUNCTION message_deleted()
CREATE FUNCTION pepsi.message_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT FROM pepsi.history h
                WHERE h.id BETWEEN (SELECT min(g.id) FROM gone g) AND (SELECT max(g.id) FROM gone g)) THEN
        DELETE FROM pepsi.history h WHERE h.id = ANY (ARRAY(SELECT g.id FROM gone g));
    END IF;
    IF current_setting('pepsi.expiring', true) = 'on' THEN
        RETURN NULL;
    END IF;
    DELETE FROM pepsi.state s USING gone g WHERE s.id = g.id;
    RETURN NULL;
END $$;

-- FUNCTION message_retire(integer, integer)
CREATE FUNCTION pepsi.message_retire(p_left integer, p_most integer, OUT dropped integer, OUT moved bigint) RETURNS record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_seq  bigint := coalesce(pg_sequence_last_value('pepsi.message_id_seq'), 0);
    v_r    record;
    v_n    bigint;
BEGIN
    dropped := 0;
    moved := 0;
    FOR v_r IN
        SELECT c.relname AS name, split_part(c.relname, '_', 2)::bigint AS lo, split_part(c.relname, '_', 3)::bigint AS hi
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'pepsi.message'::regclass AND c.relname ~ '^message_[0-9]+_[0-9]+$'
           AND split_part(c.relname, '_', 3)::bigint <= v_seq + 1
         ORDER BY 2
    LOOP
        EXIT WHEN dropped >= p_most;
        SELECT count(*) INTO v_n FROM (
            SELECT FROM pepsi.state s WHERE s.id >= v_r.lo AND s.id < v_r.hi LIMIT p_left + 1) k;
        CONTINUE WHEN v_n > p_left;
        IF EXISTS (SELECT FROM pepsi.ingress g WHERE g.id >= v_r.lo AND g.id < v_r.hi) THEN
            CONTINUE;
        END IF;
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            LOCK TABLE pepsi.message IN ACCESS EXCLUSIVE MODE;
            EXECUTE format('ALTER TABLE pepsi.message DETACH PARTITION pepsi.%I', v_r.name);
            EXECUTE format('INSERT INTO pepsi.message SELECT * FROM pepsi.%I', v_r.name);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            EXECUTE format('DROP TABLE pepsi.%I', v_r.name);
        EXCEPTION WHEN lock_not_available THEN
            RETURN;
        END;
        dropped := dropped + 1;
        moved := moved + v_n;
    END LOOP;
END $_$;

-- TABLE message
CREATE TABLE pepsi.message (
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    payload bytea DEFAULT '\x'::bytea NOT NULL
)
PARTITION BY RANGE (id);

-- FUNCTION message_row(bigint)
CREATE FUNCTION pepsi.message_row(p_id bigint) RETURNS SETOF pepsi.message
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    RETURN QUERY SELECT * FROM pepsi.message m WHERE m.id = p_id;
END $$;

-- FUNCTION message_truncated()
CREATE FUNCTION pepsi.message_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM pepsi.state;
    DELETE FROM pepsi.ingress;
    DELETE FROM pepsi.history;
    RETURN NULL;
END $$;

-- FUNCTION not_running(text, bigint, bigint)
CREATE FUNCTION pepsi.not_running(p_fn text, p_id bigint, p_pass bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_pass IS NOT NULL AND EXISTS (SELECT FROM pepsi.state_live WHERE id = p_id AND status = 'running') THEN
        RAISE EXCEPTION '%: message % is not running pass %: that pass is over', p_fn, p_id, p_pass USING ERRCODE = '55000';
    END IF;
    RAISE EXCEPTION '%: message % is not running', p_fn, p_id USING ERRCODE = '55000';
END $$;

-- FUNCTION notify_ingress()
CREATE FUNCTION pepsi.notify_ingress() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF pepsi.armed() THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    END IF;
    RETURN NULL;
END $$;

-- FUNCTION pause(bigint, interval, bigint)
CREATE FUNCTION pepsi.pause(p_id bigint, p_delay interval, p_pass bigint DEFAULT NULL::bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_delay IS NULL OR p_delay < interval '0' THEN
        RAISE EXCEPTION 'pepsi.pause: message %: the delay must be 0 or more, not %', p_id, coalesce(p_delay::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_delay > interval '1000 years' THEN
        PERFORM pepsi.check_time('pepsi.pause', 'p_delay', NULL, p_delay);
    END IF;
    UPDATE pepsi.state SET status = 'paused', timeout = now() + p_delay, updated_at = now()
     WHERE id = p_id AND status = 'running' AND (p_pass IS NULL OR pass = p_pass);
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.pause', p_id, p_pass);
    END IF;
END $$;

-- FUNCTION pause_stage(text, text, text)
CREATE FUNCTION pepsi.pause_stage(p_stage text, p_reason text DEFAULT ''::text, p_by text DEFAULT SESSION_USER) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pepsi.check_stage('pepsi.pause_stage', p_stage);
    PERFORM pepsi.check_text('pepsi.pause_stage', 'p_reason', p_reason, 1000);
    PERFORM pepsi.check_text('pepsi.pause_stage', 'p_by', p_by, 255);
    INSERT INTO pepsi.paused_stages (stage, paused_by, reason)
    VALUES (p_stage, coalesce(nullif(p_by, ''), session_user), coalesce(p_reason, ''))
    ON CONFLICT (stage) DO NOTHING;
    RETURN FOUND; -- false: paused already (by whoever paused it first)
END $$;

-- FUNCTION release(bigint[])
CREATE FUNCTION pepsi.release(p_ids bigint[]) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n bigint;
BEGIN
    UPDATE pepsi.state_live SET status = CASE WHEN timeout IS NULL THEN 'pending' ELSE 'paused' END, updated_at = now()
     WHERE id = ANY (p_ids) AND status = 'held';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    END IF;
    RETURN v_n;
END $$;

-- FUNCTION resume_stage(text)
CREATE FUNCTION pepsi.resume_stage(p_stage text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM pepsi.paused_stages WHERE stage = p_stage;
    IF NOT FOUND THEN
        RETURN false; -- it was not paused
    END IF;
    PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    RETURN true;
END $$;

-- FUNCTION run_at(text, timestamp with time zone, interval)
CREATE FUNCTION pepsi.run_at(p_fn text, p_run_at timestamp with time zone, p_delay interval) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    AS $$
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

-- FUNCTION spawn(bigint, text, bytea, jsonb, integer, text, bigint)
CREATE FUNCTION pepsi.spawn(p_parent bigint, p_stage text, p_payload bytea DEFAULT '\x'::bytea, p_headers jsonb DEFAULT '{}'::jsonb, p_priority integer DEFAULT 0, p_key text DEFAULT NULL::text, p_pass bigint DEFAULT NULL::bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION spawn_depth()
CREATE FUNCTION pepsi.spawn_depth() RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 16 $$;

-- FUNCTION spawn_many(bigint, text, bytea[], jsonb, integer, bigint)
CREATE FUNCTION pepsi.spawn_many(p_parent bigint, p_stage text, p_payloads bytea[], p_headers jsonb DEFAULT '{}'::jsonb, p_priority integer DEFAULT 0, p_pass bigint DEFAULT NULL::bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION spawn_parent(text, bigint, text, bigint)
CREATE FUNCTION pepsi.spawn_parent(p_fn text, p_parent bigint, p_stage text, p_pass bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION stage_ok(text)
CREATE FUNCTION pepsi.stage_ok(p_stage text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $_$ SELECT octet_length(p_stage) BETWEEN 1 AND 63 AND p_stage ~ '^[A-Za-z0-9_.-]+$' $_$;

-- FUNCTION trace_headers(bigint, jsonb)
CREATE FUNCTION pepsi.trace_headers(p_parent bigint, p_headers jsonb) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN coalesce(p_headers, '{}') ? 'traceparent' THEN coalesce(p_headers, '{}')
                ELSE coalesce(p_headers, '{}') || coalesce((
                     SELECT jsonb_strip_nulls(jsonb_build_object('traceparent', m.headers -> 'traceparent',
                                                                 'tracestate', m.headers -> 'tracestate'))
                       FROM pepsi.message m WHERE m.id = p_parent AND m.headers ? 'traceparent'), '{}') END
$$;

-- TABLE dispatch_stats
CREATE TABLE pepsi.dispatch_stats (
    claimed bigint DEFAULT 0 NOT NULL,
    stage_passes bigint DEFAULT 0 NOT NULL,
    requeued bigint DEFAULT 0 NOT NULL,
    done bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    paused bigint DEFAULT 0 NOT NULL,
    resumed bigint DEFAULT 0 NOT NULL,
    reset bigint DEFAULT 0 NOT NULL,
    orphans bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    expired bigint DEFAULT 0 NOT NULL,
    dispatcher text DEFAULT '*'::text NOT NULL,
    cancelled bigint DEFAULT 0 NOT NULL,
    joined bigint DEFAULT 0 NOT NULL,
    join_failed bigint DEFAULT 0 NOT NULL
);

-- TABLE failure_delta
CREATE TABLE pepsi.failure_delta (
    stage text NOT NULL,
    reason text NOT NULL,
    n integer NOT NULL
);

-- TABLE failure_groups
CREATE TABLE pepsi.failure_groups (
    stage text NOT NULL,
    reason text NOT NULL,
    n bigint NOT NULL
);

-- TABLE flow_keys
CREATE TABLE pepsi.flow_keys (
    stage text NOT NULL,
    header text NOT NULL,
    key_limit integer NOT NULL,
    CONSTRAINT flow_keys_key_limit_check CHECK ((key_limit >= 1))
);

-- TABLE history
CREATE TABLE pepsi.history (
    id bigint NOT NULL,
    n integer NOT NULL,
    at timestamp with time zone NOT NULL,
    stage text NOT NULL,
    attempt integer NOT NULL,
    kind text NOT NULL,
    reason text NOT NULL,
    pid integer,
    host text
);

-- SEQUENCE message_id_seq
CREATE SEQUENCE pepsi.message_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY message_id_seq
ALTER SEQUENCE pepsi.message_id_seq OWNED BY pepsi.message.id;

-- TABLE ingress
CREATE TABLE pepsi.ingress (
    id bigint DEFAULT nextval('pepsi.message_id_seq'::regclass) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    stage text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    payload bytea DEFAULT '\x'::bytea NOT NULL
)
WITH (autovacuum_vacuum_threshold='1000', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_insert_threshold='100000', autovacuum_analyze_threshold='1000000000');

-- TABLE message_10001_20001
CREATE TABLE pepsi.message_10001_20001 (
    id bigint DEFAULT nextval('pepsi.message_id_seq'::regclass) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    payload bytea DEFAULT '\x'::bytea NOT NULL
)
WITH (autovacuum_enabled='false');

-- TABLE message_1_10001
CREATE TABLE pepsi.message_1_10001 (
    id bigint DEFAULT nextval('pepsi.message_id_seq'::regclass) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    payload bytea DEFAULT '\x'::bytea NOT NULL
)
WITH (autovacuum_enabled='false');

-- TABLE message_20001_30001
CREATE TABLE pepsi.message_20001_30001 (
    id bigint DEFAULT nextval('pepsi.message_id_seq'::regclass) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    payload bytea DEFAULT '\x'::bytea NOT NULL
)
WITH (autovacuum_enabled='false');

-- TABLE message_default
CREATE TABLE pepsi.message_default (
    id bigint DEFAULT nextval('pepsi.message_id_seq'::regclass) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    payload bytea DEFAULT '\x'::bytea NOT NULL
);

-- SEQUENCE pass_run
CREATE SEQUENCE pepsi.pass_run
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- TABLE paused_stages
CREATE TABLE pepsi.paused_stages (
    stage text NOT NULL,
    paused_by text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    reason text DEFAULT ''::text NOT NULL
);

-- TABLE schedule
CREATE TABLE pepsi.schedule (
    name text NOT NULL,
    since timestamp with time zone NOT NULL,
    last_slot timestamp with time zone,
    last_id bigint,
    last_at timestamp with time zone
);

-- TABLE schema_code
CREATE TABLE pepsi.schema_code (
    one boolean DEFAULT true NOT NULL,
    hash text NOT NULL,
    installed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_code_one_check CHECK (one)
);

-- TABLE schema_migration
CREATE TABLE pepsi.schema_migration (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE settings
CREATE TABLE pepsi.settings (
    one boolean DEFAULT true NOT NULL,
    ingress_channel text DEFAULT 'pepsi_ingress'::text NOT NULL,
    CONSTRAINT settings_one_check CHECK (one)
);

-- TABLE stage_stats
CREATE TABLE pepsi.stage_stats (
    stage text NOT NULL,
    processed bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    timeouts bigint DEFAULT 0 NOT NULL,
    crashes bigint DEFAULT 0 NOT NULL,
    busy_seconds double precision DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    dispatcher text DEFAULT '*'::text NOT NULL,
    cancelled bigint DEFAULT 0 NOT NULL,
    not_run bigint DEFAULT 0 NOT NULL,
    recent_not_run bigint DEFAULT 0 NOT NULL,
    recent_passes bigint DEFAULT 0 NOT NULL
);

-- TABLE state
CREATE TABLE pepsi.state (
    id bigint NOT NULL,
    stage text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    timeout timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    dispatch_error text,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    handed text,
    priority integer DEFAULT 0 NOT NULL,
    dedup_key text,
    flow_key text,
    pass bigint DEFAULT 0 NOT NULL,
    ended bigint DEFAULT 0 NOT NULL,
    ended_as "char" DEFAULT '-'::"char" NOT NULL,
    parent bigint,
    result bytea
)
PARTITION BY LIST (status);

-- TABLE state_cancelled
CREATE TABLE pepsi.state_cancelled (
    id bigint NOT NULL,
    stage text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    timeout timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    dispatch_error text,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    handed text,
    priority integer DEFAULT 0 NOT NULL,
    dedup_key text,
    flow_key text,
    pass bigint DEFAULT 0 NOT NULL,
    ended bigint DEFAULT 0 NOT NULL,
    ended_as "char" DEFAULT '-'::"char" NOT NULL,
    parent bigint,
    result bytea
);

-- TABLE state_done
CREATE TABLE pepsi.state_done (
    id bigint NOT NULL,
    stage text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    timeout timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    dispatch_error text,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    handed text,
    priority integer DEFAULT 0 NOT NULL,
    dedup_key text,
    flow_key text,
    pass bigint DEFAULT 0 NOT NULL,
    ended bigint DEFAULT 0 NOT NULL,
    ended_as "char" DEFAULT '-'::"char" NOT NULL,
    parent bigint,
    result bytea
)
PARTITION BY RANGE (updated_at);

-- TABLE state_done_default
CREATE TABLE pepsi.state_done_default (
    id bigint NOT NULL,
    stage text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    timeout timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    dispatch_error text,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    handed text,
    priority integer DEFAULT 0 NOT NULL,
    dedup_key text,
    flow_key text,
    pass bigint DEFAULT 0 NOT NULL,
    ended bigint DEFAULT 0 NOT NULL,
    ended_as "char" DEFAULT '-'::"char" NOT NULL,
    parent bigint,
    result bytea
);

-- TABLE state_failed
CREATE TABLE pepsi.state_failed (
    id bigint NOT NULL,
    stage text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    timeout timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    dispatch_error text,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    handed text,
    priority integer DEFAULT 0 NOT NULL,
    dedup_key text,
    flow_key text,
    pass bigint DEFAULT 0 NOT NULL,
    ended bigint DEFAULT 0 NOT NULL,
    ended_as "char" DEFAULT '-'::"char" NOT NULL,
    parent bigint,
    result bytea
);

-- TABLE state_live
CREATE TABLE pepsi.state_live (
    id bigint NOT NULL,
    stage text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    timeout timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    dispatch_error text,
    error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    handed text,
    priority integer DEFAULT 0 NOT NULL,
    dedup_key text,
    flow_key text,
    pass bigint DEFAULT 0 NOT NULL,
    ended bigint DEFAULT 0 NOT NULL,
    ended_as "char" DEFAULT '-'::"char" NOT NULL,
    parent bigint,
    result bytea
)
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.02', autovacuum_analyze_scale_factor='0.02');

-- TABLE stats_flush
CREATE TABLE pepsi.stats_flush (
    dispatcher text NOT NULL,
    token bigint NOT NULL,
    seq bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE throughput
CREATE TABLE pepsi.throughput (
    at timestamp with time zone NOT NULL,
    stage text NOT NULL,
    processed bigint NOT NULL,
    failed bigint NOT NULL
);

-- TABLE wake
CREATE UNLOGGED TABLE pepsi.wake (
    dispatcher text NOT NULL,
    armed boolean DEFAULT true NOT NULL
);

-- SEQUENCE wake_armed
CREATE UNLOGGED SEQUENCE pepsi.wake_armed
    START WITH 0
    INCREMENT BY 1
    MINVALUE 0
    NO MAXVALUE
    CACHE 1;

-- TABLE ATTACH message_10001_20001
ALTER TABLE ONLY pepsi.message ATTACH PARTITION pepsi.message_10001_20001 FOR VALUES FROM ('10001') TO ('20001');

-- TABLE ATTACH message_1_10001
ALTER TABLE ONLY pepsi.message ATTACH PARTITION pepsi.message_1_10001 FOR VALUES FROM ('1') TO ('10001');

-- TABLE ATTACH message_20001_30001
ALTER TABLE ONLY pepsi.message ATTACH PARTITION pepsi.message_20001_30001 FOR VALUES FROM ('20001') TO ('30001');

-- TABLE ATTACH message_default
ALTER TABLE ONLY pepsi.message ATTACH PARTITION pepsi.message_default DEFAULT;

-- TABLE ATTACH state_cancelled
ALTER TABLE ONLY pepsi.state ATTACH PARTITION pepsi.state_cancelled FOR VALUES IN ('cancelled');

-- TABLE ATTACH state_done
ALTER TABLE ONLY pepsi.state ATTACH PARTITION pepsi.state_done FOR VALUES IN ('done');

-- TABLE ATTACH state_done_default
ALTER TABLE ONLY pepsi.state_done ATTACH PARTITION pepsi.state_done_default DEFAULT;

-- TABLE ATTACH state_failed
ALTER TABLE ONLY pepsi.state ATTACH PARTITION pepsi.state_failed FOR VALUES IN ('failed');

-- TABLE ATTACH state_live
ALTER TABLE ONLY pepsi.state ATTACH PARTITION pepsi.state_live FOR VALUES IN ('pending', 'running', 'paused', 'held', 'waiting');

-- DEFAULT message id
ALTER TABLE ONLY pepsi.message ALTER COLUMN id SET DEFAULT nextval('pepsi.message_id_seq'::regclass);

-- CONSTRAINT dispatch_stats dispatch_stats_pkey
ALTER TABLE ONLY pepsi.dispatch_stats
    ADD CONSTRAINT dispatch_stats_pkey PRIMARY KEY (dispatcher);

-- CONSTRAINT failure_groups failure_groups_pkey
ALTER TABLE ONLY pepsi.failure_groups
    ADD CONSTRAINT failure_groups_pkey PRIMARY KEY (stage, reason);

-- CONSTRAINT flow_keys flow_keys_pkey
ALTER TABLE ONLY pepsi.flow_keys
    ADD CONSTRAINT flow_keys_pkey PRIMARY KEY (stage);

-- CHECK CONSTRAINT history history_kind_check
ALTER TABLE pepsi.history
    ADD CONSTRAINT history_kind_check CHECK ((kind = ANY (ARRAY['answer'::text, 'crash'::text, 'timeout'::text, 'protocol'::text, 'fail'::text]))) NOT VALID;

-- CONSTRAINT history history_pkey
ALTER TABLE ONLY pepsi.history
    ADD CONSTRAINT history_pkey PRIMARY KEY (id, n);

-- CONSTRAINT message message_pkey
ALTER TABLE ONLY pepsi.message
    ADD CONSTRAINT message_pkey PRIMARY KEY (id);

-- CONSTRAINT message_10001_20001 message_10001_20001_pkey
ALTER TABLE ONLY pepsi.message_10001_20001
    ADD CONSTRAINT message_10001_20001_pkey PRIMARY KEY (id);

-- CONSTRAINT message_1_10001 message_1_10001_pkey
ALTER TABLE ONLY pepsi.message_1_10001
    ADD CONSTRAINT message_1_10001_pkey PRIMARY KEY (id);

-- CONSTRAINT message_20001_30001 message_20001_30001_pkey
ALTER TABLE ONLY pepsi.message_20001_30001
    ADD CONSTRAINT message_20001_30001_pkey PRIMARY KEY (id);

-- CONSTRAINT message_default message_default_pkey
ALTER TABLE ONLY pepsi.message_default
    ADD CONSTRAINT message_default_pkey PRIMARY KEY (id);

-- CONSTRAINT paused_stages paused_stages_pkey
ALTER TABLE ONLY pepsi.paused_stages
    ADD CONSTRAINT paused_stages_pkey PRIMARY KEY (stage);

-- CONSTRAINT schedule schedule_pkey
ALTER TABLE ONLY pepsi.schedule
    ADD CONSTRAINT schedule_pkey PRIMARY KEY (name);

-- CONSTRAINT schema_code schema_code_pkey
ALTER TABLE ONLY pepsi.schema_code
    ADD CONSTRAINT schema_code_pkey PRIMARY KEY (one);

-- CONSTRAINT schema_migration schema_migration_pkey
ALTER TABLE ONLY pepsi.schema_migration
    ADD CONSTRAINT schema_migration_pkey PRIMARY KEY (version);

-- CONSTRAINT settings settings_pkey
ALTER TABLE ONLY pepsi.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (one);

-- CONSTRAINT stage_stats stage_stats_pkey
ALTER TABLE ONLY pepsi.stage_stats
    ADD CONSTRAINT stage_stats_pkey PRIMARY KEY (stage, dispatcher);

-- CONSTRAINT state_cancelled state_cancelled_pkey
ALTER TABLE ONLY pepsi.state_cancelled
    ADD CONSTRAINT state_cancelled_pkey PRIMARY KEY (id);

-- CONSTRAINT state_failed state_failed_pkey
ALTER TABLE ONLY pepsi.state_failed
    ADD CONSTRAINT state_failed_pkey PRIMARY KEY (id);

-- CONSTRAINT state_live state_live_pkey
ALTER TABLE ONLY pepsi.state_live
    ADD CONSTRAINT state_live_pkey PRIMARY KEY (id);

-- CONSTRAINT stats_flush stats_flush_pkey
ALTER TABLE ONLY pepsi.stats_flush
    ADD CONSTRAINT stats_flush_pkey PRIMARY KEY (dispatcher);

-- CONSTRAINT throughput throughput_pkey
ALTER TABLE ONLY pepsi.throughput
    ADD CONSTRAINT throughput_pkey PRIMARY KEY (at, stage);

-- CONSTRAINT wake wake_pkey
ALTER TABLE ONLY pepsi.wake
    ADD CONSTRAINT wake_pkey PRIMARY KEY (dispatcher);

-- INDEX state_parent
CREATE INDEX state_parent ON ONLY pepsi.state USING btree (parent, id) WHERE (parent IS NOT NULL);

-- INDEX state_cancelled_parent_id_idx
CREATE INDEX state_cancelled_parent_id_idx ON pepsi.state_cancelled USING btree (parent, id) WHERE (parent IS NOT NULL);

-- INDEX state_dedup
CREATE UNIQUE INDEX state_dedup ON pepsi.state_live USING btree (dedup_key) WHERE ((dedup_key IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'running'::text, 'paused'::text, 'held'::text, 'waiting'::text])));

-- INDEX state_done_id
CREATE INDEX state_done_id ON ONLY pepsi.state_done USING btree (id);

-- INDEX state_done_default_id_idx
CREATE INDEX state_done_default_id_idx ON pepsi.state_done_default USING btree (id);

-- INDEX state_done_erred
CREATE INDEX state_done_erred ON ONLY pepsi.state_done USING btree (id) WHERE ((error IS NOT NULL) OR (dispatch_error IS NOT NULL));

-- INDEX state_done_default_id_idx1
CREATE INDEX state_done_default_id_idx1 ON pepsi.state_done_default USING btree (id) WHERE ((error IS NOT NULL) OR (dispatch_error IS NOT NULL));

-- INDEX state_done_parent_id_idx
CREATE INDEX state_done_parent_id_idx ON ONLY pepsi.state_done USING btree (parent, id) WHERE (parent IS NOT NULL);

-- INDEX state_done_default_parent_id_idx
CREATE INDEX state_done_default_parent_id_idx ON pepsi.state_done_default USING btree (parent, id) WHERE (parent IS NOT NULL);

-- INDEX state_failed_group
CREATE INDEX state_failed_group ON pepsi.state_failed USING btree (regexp_replace(substr(COALESCE(NULLIF(error, ''::text), NULLIF(dispatch_error, ''::text), '(none)'::text), 1, 250), '[0-9]+'::text, 'N'::text, 'g'::text), stage, id);

-- INDEX state_failed_group_at
CREATE INDEX state_failed_group_at ON pepsi.state_failed USING btree (regexp_replace(substr(COALESCE(NULLIF(error, ''::text), NULLIF(dispatch_error, ''::text), '(none)'::text), 1, 250), '[0-9]+'::text, 'N'::text, 'g'::text) COLLATE "C", stage, updated_at, id);

-- INDEX state_failed_parent_id_idx
CREATE INDEX state_failed_parent_id_idx ON pepsi.state_failed USING btree (parent, id) WHERE (parent IS NOT NULL);

-- INDEX state_failed_stage
CREATE INDEX state_failed_stage ON pepsi.state_failed USING btree (stage, id);

-- INDEX state_failed_updated
CREATE INDEX state_failed_updated ON pepsi.state_failed USING btree (updated_at);

-- INDEX state_flow
CREATE INDEX state_flow ON pepsi.state_live USING btree (stage, flow_key, id) WHERE ((flow_key IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'paused'::text, 'held'::text])));

-- INDEX state_live_erred
CREATE INDEX state_live_erred ON pepsi.state_live USING btree (id) WHERE ((error IS NOT NULL) OR (dispatch_error IS NOT NULL));

-- INDEX state_live_parent_id_idx
CREATE INDEX state_live_parent_id_idx ON pepsi.state_live USING btree (parent, id) WHERE (parent IS NOT NULL);

-- INDEX state_paused
CREATE INDEX state_paused ON pepsi.state_live USING btree (timeout) WHERE (status = 'paused'::text);

-- INDEX state_paused_stage
CREATE INDEX state_paused_stage ON pepsi.state_live USING btree (stage, timeout) WHERE (status = 'paused'::text);

-- INDEX state_pending
CREATE INDEX state_pending ON pepsi.state_live USING btree (stage, priority, id) INCLUDE (updated_at) WHERE (status = 'pending'::text);

-- INDEX state_running
CREATE INDEX state_running ON pepsi.state_live USING btree (id) WHERE (status = 'running'::text);

-- INDEX state_waiting
CREATE INDEX state_waiting ON pepsi.state_live USING btree (stage, id) WHERE (status = 'waiting'::text);

-- INDEX ATTACH message_10001_20001_pkey
ALTER INDEX pepsi.message_pkey ATTACH PARTITION pepsi.message_10001_20001_pkey;

-- INDEX ATTACH message_1_10001_pkey
ALTER INDEX pepsi.message_pkey ATTACH PARTITION pepsi.message_1_10001_pkey;

-- INDEX ATTACH message_20001_30001_pkey
ALTER INDEX pepsi.message_pkey ATTACH PARTITION pepsi.message_20001_30001_pkey;

-- INDEX ATTACH message_default_pkey
ALTER INDEX pepsi.message_pkey ATTACH PARTITION pepsi.message_default_pkey;

-- INDEX ATTACH state_cancelled_parent_id_idx
ALTER INDEX pepsi.state_parent ATTACH PARTITION pepsi.state_cancelled_parent_id_idx;

-- INDEX ATTACH state_done_default_id_idx
ALTER INDEX pepsi.state_done_id ATTACH PARTITION pepsi.state_done_default_id_idx;

-- INDEX ATTACH state_done_default_id_idx1
ALTER INDEX pepsi.state_done_erred ATTACH PARTITION pepsi.state_done_default_id_idx1;

-- INDEX ATTACH state_done_default_parent_id_idx
ALTER INDEX pepsi.state_done_parent_id_idx ATTACH PARTITION pepsi.state_done_default_parent_id_idx;

-- INDEX ATTACH state_done_parent_id_idx
ALTER INDEX pepsi.state_parent ATTACH PARTITION pepsi.state_done_parent_id_idx;

-- INDEX ATTACH state_failed_parent_id_idx
ALTER INDEX pepsi.state_parent ATTACH PARTITION pepsi.state_failed_parent_id_idx;

-- INDEX ATTACH state_live_parent_id_idx
ALTER INDEX pepsi.state_parent ATTACH PARTITION pepsi.state_live_parent_id_idx;

-- TRIGGER state_failed failure_changed
CREATE TRIGGER failure_changed AFTER UPDATE ON pepsi.state_failed FOR EACH ROW WHEN (((old.stage IS DISTINCT FROM new.stage) OR (old.error IS DISTINCT FROM new.error) OR (old.dispatch_error IS DISTINCT FROM new.dispatch_error))) EXECUTE FUNCTION pepsi.failure_counted();

-- TRIGGER state_failed failure_entered
CREATE TRIGGER failure_entered AFTER INSERT OR DELETE ON pepsi.state_failed FOR EACH ROW EXECUTE FUNCTION pepsi.failure_counted();

-- TRIGGER state_failed failures_truncated
CREATE TRIGGER failures_truncated AFTER TRUNCATE ON pepsi.state_failed FOR EACH STATEMENT EXECUTE FUNCTION pepsi.failures_truncated();

-- TRIGGER message message_deleted
CREATE TRIGGER message_deleted AFTER DELETE ON pepsi.message REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pepsi.message_deleted();

-- TRIGGER message message_truncated
CREATE TRIGGER message_truncated AFTER TRUNCATE ON pepsi.message FOR EACH STATEMENT EXECUTE FUNCTION pepsi.message_truncated();

-- TRIGGER state state_ingress
CREATE TRIGGER state_ingress AFTER INSERT ON pepsi.state FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress();

-- TRIGGER state_live state_live_ingress
CREATE TRIGGER state_live_ingress AFTER INSERT ON pepsi.state_live FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress();
