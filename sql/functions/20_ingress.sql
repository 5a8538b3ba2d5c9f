-- The ingress trigger: every statement that inserts into pepsi.state or
-- straight into pepsi.state_live (COPY ingress, pepsi.enqueue_key(),
-- admissions, INSERTs) wakes an armed dispatcher, with one NOTIFY per
-- statement.
--
-- The triggers have no WHEN: a trigger's WHEN is compiled anew for every
-- statement that fires it (an INSERT parsed and planned pepsi.armed()
-- again, even while nobody was armed). The PL/pgSQL function reads the
-- flag without a query (pepsi.armed(), 10_wake.sql), at the end of the
-- inserting statement: the dispatcher's arming (see pkg/dispatch/wake.go)
-- covers a producer that read the flag as off just before the arm
-- committed.
CREATE OR REPLACE FUNCTION pepsi.notify_ingress() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pepsi.armed() THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    END IF;
    RETURN NULL;
END $$;

-- The triggers are made again only when they differ from these (as
-- pg_get_triggerdef prints them): DROP TRIGGER takes ACCESS EXCLUSIVE on
-- the table, which an unchanged trigger need not cost running dispatchers.
DO $$
DECLARE
    v_t record;
BEGIN
    FOR v_t IN SELECT * FROM (VALUES
        ('pepsi.state', 'state_ingress',
         'CREATE TRIGGER state_ingress AFTER INSERT ON pepsi.state FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress()'),
        ('pepsi.state_live', 'state_live_ingress',
         'CREATE TRIGGER state_live_ingress AFTER INSERT ON pepsi.state_live FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress()')
    ) t (tbl, name, def)
    LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = v_t.tbl::regclass AND g.tgname = v_t.name
                                                         AND pg_get_triggerdef(g.oid) = v_t.def);
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', v_t.name, v_t.tbl);
        EXECUTE v_t.def;
    END LOOP;
END $$;
