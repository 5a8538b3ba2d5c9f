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

-- pepsi.armed() reads it (without a query) and pepsi.arm() sets it:
-- sql/functions/10_wake.sql.

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

-- pepsi.enqueue() writing there, pepsi.admit(), the ingress trigger's
-- function reading the same flag and pepsi.message_truncated() emptying
-- pepsi.ingress too were made here; they are in sql/functions now
-- (20_enqueue.sql, 20_admit.sql, 20_ingress.sql, 20_message_cascade.sql).
