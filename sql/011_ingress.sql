-- pepsi schema, version 11: pepsi.enqueue() writes one row, and reads the
-- wake flag without a query.
--
-- An application that calls pepsi.enqueue() in its own transaction (the
-- outbox) paid, besides its own INSERT, for two rows (pepsi.message and
-- pepsi.state_live, with its indexes) and for the ingress trigger, whose
-- PL/pgSQL query read the wake flag. Measured with pgbench (an
-- application INSERT and pepsi.enqueue() in one transaction, 8 clients,
-- synchronous_commit on, no consumer), against the same transaction with
-- a plain INSERT into a table of the shape of a message: the two rows
-- alone 0.84x, the trigger's query another 0.13x, together 0.70x.
--
-- Now pepsi.enqueue() (without a deduplication key) inserts one row into
-- pepsi.ingress, a heap without indexes, and the dispatcher admits what
-- is there, in batches, into pepsi.message and pepsi.state_live (pending
-- at its stage, updated_at its enqueue time) at each of its polls:
-- pepsi.admit(). `pepsi queue` admits before it reads. A message's id
-- is drawn at enqueue from pepsi.message's sequence, as before, so the
-- ingress order is unchanged. A message with a key still goes straight
-- to pepsi.state (pepsi.enqueue_key: the key is checked against the
-- unfinished messages as it is enqueued), and so do COPY ingress and
-- INSERTs into pepsi.state.
--
-- The wake flag that producers read is pepsi.wake_armed, a sequence
-- whose value is the number of armed dispatchers (pepsi.wake's rows with
-- armed): pepsi.arm() writes a dispatcher's row and sets it, one
-- dispatcher at a time. pg_sequence_last_value() is a plain function
-- call: PL/pgSQL evaluates it without a query. A sequence never set (a
-- fresh one, or an unlogged one after a crash, as pepsi.wake is emptied
-- by one) reads as armed. Producers need USAGE on it, as on
-- pepsi.message_id_seq.
--
-- A dispatcher of an earlier version does not admit: restart every
-- dispatcher with this version after migrating.
--
-- Cost: a new empty table and functions; milliseconds on a database of
-- 1 000 000 messages, whatever they hold.

-- The flag: unlogged where the server has unlogged sequences (15), so
-- that a crash leaves it unset, as it leaves pepsi.wake empty.
DO $$
BEGIN
    IF current_setting('server_version_num')::integer >= 150000 THEN
        EXECUTE 'CREATE UNLOGGED SEQUENCE pepsi.wake_armed MINVALUE 0';
    ELSE
        EXECUTE 'CREATE SEQUENCE pepsi.wake_armed MINVALUE 0';
    END IF;
END $$;
SELECT setval('pepsi.wake_armed', count(*) FILTER (WHERE armed), true) FROM pepsi.wake HAVING count(*) > 0;

-- pepsi.armed() is the one rule producers read. VOLATILE, as the sequence
-- it reads changes outside any transaction; so it is inlined where it is
-- called, and PL/pgSQL evaluates IF pepsi.armed() without a query.
CREATE OR REPLACE FUNCTION pepsi.armed() RETURNS boolean
LANGUAGE sql VOLATILE AS $$ SELECT coalesce(pg_sequence_last_value('pepsi.wake_armed'), 1) <> 0 $$;

-- pepsi.arm writes set's wake flag and sets pepsi.wake_armed to the
-- number of armed dispatchers. The lock orders dispatchers that write at
-- once: each counts after the one before committed (a volatile function's
-- statements see what committed before each). The sequence is set before
-- the caller commits: an arm is seen at once (a producer notifies for
-- nothing until then, at worst), and so is a disarm (the dispatcher is
-- busy polling).
CREATE FUNCTION pepsi.arm(p_set text, p_on boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE pepsi.wake IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO pepsi.wake (dispatcher, armed) VALUES (p_set, p_on)
        ON CONFLICT (dispatcher) DO UPDATE SET armed = excluded.armed WHERE pepsi.wake.armed <> excluded.armed;
    PERFORM setval('pepsi.wake_armed', (SELECT count(*) FROM pepsi.wake WHERE armed), true);
END $$;

-- The ingress table: what pepsi.enqueue() writes, until a dispatcher (or
-- `pepsi queue`) admits it. No index: it is read whole, a batch at a time,
-- and stays as small as what arrives between two polls.
CREATE TABLE pepsi.ingress (
    id         bigint NOT NULL DEFAULT nextval('pepsi.message_id_seq'::regclass),
    created_at timestamptz NOT NULL DEFAULT now(),
    stage      text NOT NULL,
    priority   integer NOT NULL DEFAULT 0,
    headers    jsonb NOT NULL DEFAULT '{}',
    payload    bytea NOT NULL DEFAULT ''
) WITH (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0,
        autovacuum_vacuum_insert_threshold = 100000, autovacuum_analyze_threshold = 1000000000);

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

-- pepsi.admit moves up to p_limit rows of pepsi.ingress into
-- pepsi.message and pepsi.state_live, pending at their stage, and returns
-- how many. Rows another session is admitting are left to it. With
-- nothing to admit it inserts nothing: the ingress trigger would notify
-- for nothing (it fires for a statement that inserts no row).
CREATE FUNCTION pepsi.admit(p_limit integer) RETURNS bigint
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
                ELSE (SELECT i.headers ->> k.header FROM pepsi.flow_keys k WHERE k.stage = i.stage) END,
           i.created_at
      FROM i;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- The ingress trigger of pepsi.state and pepsi.state_live (COPY ingress,
-- admissions, INSERTs) reads the same flag.
CREATE OR REPLACE FUNCTION pepsi.notify_ingress() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pepsi.armed() THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    END IF;
    RETURN NULL;
END $$;

-- TRUNCATE pepsi.message empties the queue, the messages not yet
-- admitted included.
CREATE OR REPLACE FUNCTION pepsi.message_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pepsi.state;
    DELETE FROM pepsi.ingress;
    RETURN NULL;
END $$;
