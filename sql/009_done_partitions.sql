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

-- 1. The table as it is becomes state_live.
DROP TRIGGER state_ingress ON pepsi.state;
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
-- state_live (the SQL API and COPY ingress do) wakes an armed dispatcher.
CREATE TRIGGER state_ingress AFTER INSERT ON pepsi.state
    FOR EACH STATEMENT WHEN (pepsi.armed()) EXECUTE FUNCTION pepsi.notify_ingress();
CREATE TRIGGER state_live_ingress AFTER INSERT ON pepsi.state_live
    FOR EACH STATEMENT WHEN (pepsi.armed()) EXECUTE FUNCTION pepsi.notify_ingress();

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
    INSERT INTO pepsi.state_live (id, stage, priority, flow_key)
    SELECT id, p_stage, coalesce(p_priority, 0), CASE WHEN coalesce(p_headers, '{}') = '{}' THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT p_headers ->> k.header FROM pepsi.flow_keys k WHERE k.stage = p_stage) END FROM m
    RETURNING id INTO v_id;
    RETURN v_id;
END $$;

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
        INSERT INTO pepsi.state_live (id, stage, priority, flow_key)
        SELECT m.id, p_stage, coalesce(p_priority, 0), CASE WHEN coalesce(p_headers, '{}') = '{}' THEN NULL -- no headers: no key, no lookup
             ELSE (SELECT p_headers ->> k.header FROM pepsi.flow_keys k WHERE k.stage = p_stage) END FROM m
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

-- 5. Retention. A message whose queue row goes with its range is deleted
-- by pepsi.expire_done itself: the cascade from message to state is
-- skipped there (pepsi.expiring), as the range is dropped whole.
CREATE OR REPLACE FUNCTION pepsi.message_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('pepsi.expiring', true) = 'on' THEN
        RETURN NULL;
    END IF;
    DELETE FROM pepsi.state s USING gone g WHERE s.id = g.id;
    RETURN NULL;
END $$;

-- pepsi.done_ahead creates the ranges of state_done, p_width each, that
-- cover from the end of the last one (or from the next second, when that
-- is past: the rows done in between are in the default partition) to
-- p_ahead widths past that, and returns how many it created. Each is
-- created as a partition of state_done, which takes ACCESS EXCLUSIVE on
-- state_done for as long as that takes (the default partition is scanned
-- for rows of the new range): the settle that moves rows there waits that
-- long. ATTACH PARTITION would not stop it, but PostgreSQL 15 plans a
-- statement concurrently with an ATTACH, and a generic plan made during
-- one can keep the partitions it knew for good: prepared
-- `SELECT count(*) FROM pepsi.state WHERE status = $1` answered 0 for 200
-- done rows, in 5 of 40 tries.
CREATE FUNCTION pepsi.done_ahead(p_width interval, p_ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
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
END $$;

-- pepsi.expire_done does one step of the retention sweep: in the oldest
-- range that ended longer than p_keep ago, it deletes the messages of the
-- next p_batch rows by id, and drops the range once they are all gone;
-- when no range has expired, it deletes, among the next p_batch rows of
-- the default partition, those done longer than p_keep ago. The next rows
-- are those after p_after when p_part, the partition the step before
-- worked in, is this step's (else from the first). part and last are
-- where the next step goes on, deleted the messages deleted, more whether
-- a next step has work.
CREATE FUNCTION pepsi.expire_done(p_keep interval, p_part text, p_after bigint, p_batch integer,
                                  OUT part text, OUT last bigint, OUT deleted bigint, OUT more boolean)
LANGUAGE plpgsql AS $$
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
        EXECUTE format('SELECT array(SELECT id FROM pepsi.%I WHERE id > $1 ORDER BY id LIMIT $2)', v_name)
           INTO v_ids USING p_after, p_batch;
        DELETE FROM pepsi.message m WHERE m.id = ANY (v_ids);
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
        RETURNING s.id
    ), msg AS (
        DELETE FROM pepsi.message m USING gone g WHERE m.id = g.id RETURNING m.id
    )
    SELECT (SELECT max(id) FROM batch), (SELECT count(*) FROM msg) INTO last, deleted;
    last := coalesce(last, 0);
    more := last <> 0;
END $$;
