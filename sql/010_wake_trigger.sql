-- pepsi schema, version 10: the ingress trigger reads the wake flag in
-- its own function.
--
-- Since version 4 the ingress triggers were declared WHEN (pepsi.armed()).
-- A trigger's WHEN is compiled anew for every statement that fires it, and
-- pepsi.armed() is a SQL function: every INSERT into the queue parsed and
-- planned its query again, even while nobody was armed and nothing was
-- sent. Measured with pgbench (an application INSERT and
-- pepsi.enqueue() in one transaction, 8 clients, synchronous_commit off so
-- that CPU sets the pace): 3 541 tx/s with the WHEN against 4 217 with the
-- trigger disabled. Now the trigger has no WHEN and its PL/pgSQL function
-- reads the flag and the channel in one statement whose plan the session
-- keeps: one function call and one index-free read of a one-page
-- unlogged table per statement.
--
-- It reads the flag with a snapshot of its own, at the end of the
-- inserting statement, as the WHEN did: the dispatcher's arming (see
-- pkg/dispatch/wake.go) covers a producer that read the flag as off just
-- before the arm committed, whichever snapshot it read it in.
--
-- Cost: the catalog only (two triggers made again); milliseconds on a
-- database of 1 000 000 messages.

CREATE OR REPLACE FUNCTION pepsi.notify_ingress() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_channel text;
BEGIN
    SELECT s.ingress_channel INTO v_channel
      FROM pepsi.settings s
     WHERE coalesce((SELECT bool_or(w.armed) FROM pepsi.wake w), true);
    IF FOUND THEN
        PERFORM pg_notify(v_channel, '');
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER state_ingress ON pepsi.state;
CREATE TRIGGER state_ingress AFTER INSERT ON pepsi.state
    FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress();

DROP TRIGGER state_live_ingress ON pepsi.state_live;
CREATE TRIGGER state_live_ingress AFTER INSERT ON pepsi.state_live
    FOR EACH STATEMENT EXECUTE FUNCTION pepsi.notify_ingress();
