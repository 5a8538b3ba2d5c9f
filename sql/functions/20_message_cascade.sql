-- The cascade from pepsi.message to pepsi.state (the queue row has no
-- foreign key: it cost every enqueued row a lookup and a row lock of its
-- message). pepsi writes a message's two rows together and deletes them
-- together (retention, purge); these statement-level triggers delete the
-- queue rows of the messages deleted.
--
-- A message whose queue row goes with its range of pepsi.state_done is
-- deleted by pepsi.expire_done() itself: the cascade to pepsi.state is
-- skipped there (pepsi.expiring), as the range is dropped whole.
--
-- A message's history (pepsi.history) goes with it on every path. Most
-- messages never failed a pass: one probe of history's primary key over
-- the bounds of the deleted ids finds none, and the delete is skipped.
CREATE OR REPLACE FUNCTION pepsi.message_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
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

-- TRUNCATE pepsi.message empties the queue, the messages not yet admitted
-- and the history included. DELETE, not TRUNCATE: "TRUNCATE pepsi.state, pepsi.message"
-- has emptied both already, and may not truncate pepsi.state again.
CREATE OR REPLACE FUNCTION pepsi.message_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pepsi.state;
    DELETE FROM pepsi.ingress;
    DELETE FROM pepsi.history;
    RETURN NULL;
END $$;

-- The triggers of the partitioned pepsi.message, made again only when they
-- differ from these (as pg_get_triggerdef prints them): DROP TRIGGER takes
-- ACCESS EXCLUSIVE on the table.
DO $$
DECLARE
    v_t record;
BEGIN
    FOR v_t IN SELECT * FROM (VALUES
        ('pepsi.message', 'message_deleted',
         'CREATE TRIGGER message_deleted AFTER DELETE ON pepsi.message REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pepsi.message_deleted()'),
        ('pepsi.message', 'message_truncated',
         'CREATE TRIGGER message_truncated AFTER TRUNCATE ON pepsi.message FOR EACH STATEMENT EXECUTE FUNCTION pepsi.message_truncated()')
    ) t (tbl, name, def)
    LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = v_t.tbl::regclass AND g.tgname = v_t.name
                                                         AND pg_get_triggerdef(g.oid) = v_t.def);
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', v_t.name, v_t.tbl);
        EXECUTE v_t.def;
    END LOOP;
END $$;
