-- pepsi schema, version 12: pepsi.message in ranges of ids, dropped whole.
--
-- Retention deletes a message when its queue row expires; the rows of
-- pepsi.message were deleted one by one, so its heap and primary key kept
-- the high-water mark of whatever was retained at once (an index's emptied
-- pages are reused, never given back). pepsi.message becomes a table
-- partitioned by range of id:
--
--   pepsi.message_FROM_TO   the ids FROM to TO - 1, as they are drawn from
--                           pepsi.message_id_seq: created ahead by the
--                           janitor (pepsi.message_ahead), and dropped whole
--                           once no queue row holds one of their ids but a
--                           few (pepsi.message_retire), those few moved to
--                           the default partition;
--   pepsi.message_default   what no range holds: ids drawn while no range
--                           was ahead (RETENTION = 0, a janitor away), and
--                           the few moved out of a retired range (failed
--                           messages kept until retried or purged).
--
-- Retention still deletes each expired message, so RETENTION governs what
-- can be read as before; the space is given back when the range goes. A
-- range's rows are written once and deleted once, and it is dropped
-- soon after: autovacuum is off for the ranges (a VACUUM would give back
-- nothing the DROP does not).
--
-- The id column was an identity, which a partitioned table cannot have
-- (PostgreSQL 15): pepsi.message_id_seq becomes a plain sequence, the same
-- name, value and grants.
--
-- A dispatcher of an earlier version creates no ranges (the messages go
-- to the default partition, as to the table before) and its vacuum sweep
-- fails on pepsi.message (a partitioned table has no statistics of its
-- own): restart every dispatcher with this version after migrating.
--
-- On a populated database the table as it is becomes the first range
-- (one scan checks its ids), empty ranges are created ahead of the
-- sequence, and its messages expire row by row as before: milliseconds
-- plus the scan, about a second on a million rows.

LOCK TABLE pepsi.message IN ACCESS EXCLUSIVE MODE;
LOCK TABLE pepsi.ingress IN ACCESS EXCLUSIVE MODE;

-- 1. The sequence: a plain one, continued from the identity's, with its
-- grants; pepsi.ingress's default moves to it before the identity goes.
CREATE SEQUENCE pepsi.message_id_seq_plain AS bigint;
DO $$
DECLARE
    v_last   bigint;
    v_called boolean;
    v_acl    record;
BEGIN
    SELECT last_value, is_called INTO v_last, v_called FROM pepsi.message_id_seq;
    PERFORM setval('pepsi.message_id_seq_plain', v_last, v_called);
    FOR v_acl IN
        SELECT a.grantee, a.privilege_type, a.is_grantable
          FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.oid = 'pepsi.message_id_seq'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON SEQUENCE pepsi.message_id_seq_plain TO %s%s', v_acl.privilege_type,
                       CASE WHEN v_acl.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(v_acl.grantee::regrole::text) END,
                       CASE WHEN v_acl.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END $$;
ALTER TABLE pepsi.ingress ALTER COLUMN id SET DEFAULT nextval('pepsi.message_id_seq_plain'::regclass);
ALTER TABLE pepsi.message ALTER COLUMN id DROP IDENTITY;
ALTER SEQUENCE pepsi.message_id_seq_plain RENAME TO message_id_seq;

-- 2. The old table becomes the range of the ids drawn so far (named from
-- 0: the name gives the order, the bound is MINVALUE), attached below
-- unless it is empty; the partitioned table has its columns in the same
-- order. The triggers an earlier pepsi made on it go: those of the
-- partitioned table are made after the migrations
-- (sql/functions/20_message_cascade.sql).
DROP TRIGGER IF EXISTS message_deleted ON pepsi.message;
DROP TRIGGER IF EXISTS message_truncated ON pepsi.message;
DO $$
DECLARE
    v_to bigint;
BEGIN
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO v_to FROM pepsi.message_id_seq;
    v_to := greatest(v_to, (SELECT max(id) + 1 FROM pepsi.message), 1);
    EXECUTE format('ALTER INDEX pepsi.message_pkey RENAME TO %I', 'message_0_' || v_to || '_pkey');
    EXECUTE format('ALTER TABLE pepsi.message RENAME TO %I', 'message_0_' || v_to);
    PERFORM set_config('pepsi.message_first', v_to::text, true);
END $$;
CREATE TABLE pepsi.message (
    id         bigint NOT NULL DEFAULT nextval('pepsi.message_id_seq'::regclass),
    created_at timestamptz NOT NULL DEFAULT now(),
    headers    jsonb NOT NULL DEFAULT '{}',
    payload    bytea NOT NULL DEFAULT '',
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);
ALTER SEQUENCE pepsi.message_id_seq OWNED BY pepsi.message.id;
CREATE TABLE pepsi.message_default PARTITION OF pepsi.message DEFAULT;

-- An empty old table goes; the first range starts where it ended. Then
-- the first ranges ahead of the sequence: what pepsi.message_ahead(10000,
-- 3) makes (sql/functions/20_message_ranges.sql, installed only after the
-- migrations), written out here for this step: ranges of 10 000 ids from
-- the end of the last one until 3 widths past the sequence's value. The
-- table is locked and its default partition empty, so none can fail.
DO $$
DECLARE
    v_to    bigint := current_setting('pepsi.message_first')::bigint;
    v_seq   bigint := coalesce(pg_sequence_last_value('pepsi.message_id_seq'), 0);
    v_from  bigint := v_to;
    v_empty boolean;
BEGIN
    EXECUTE format('SELECT NOT EXISTS (SELECT FROM pepsi.%I)', 'message_0_' || v_to) INTO v_empty;
    IF v_empty THEN
        EXECUTE format('DROP TABLE pepsi.%I', 'message_0_' || v_to);
        EXECUTE format('CREATE TABLE pepsi.%I PARTITION OF pepsi.message FOR VALUES FROM (%s) TO (%s)'
                       ' WITH (autovacuum_enabled = false)', 'message_' || v_to || '_' || v_to + 10000, v_to, v_to + 10000);
        v_from := v_to + 10000;
    ELSE
        EXECUTE format('ALTER TABLE pepsi.message ATTACH PARTITION pepsi.%I FOR VALUES FROM (MINVALUE) TO (%s)',
                       'message_0_' || v_to, v_to);
    END IF;
    IF v_from <= v_seq THEN
        v_from := v_seq + 10000;
    END IF;
    WHILE v_from < v_seq + 1 + 3 * 10000 LOOP
        EXECUTE format('CREATE TABLE pepsi.%I PARTITION OF pepsi.message FOR VALUES FROM (%s) TO (%s)'
                       ' WITH (autovacuum_enabled = false)', 'message_' || v_from || '_' || v_from + 10000, v_from, v_from + 10000);
        v_from := v_from + 10000;
    END LOOP;
END $$;

-- pepsi.message_ahead, pepsi.message_retire and pepsi.message_row, and
-- pepsi.expire_done deleting between the bounds of the ids, were made
-- here; they are in sql/functions now (20_message_ranges.sql,
-- 20_done_partitions.sql).
