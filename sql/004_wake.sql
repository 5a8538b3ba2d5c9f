-- pepsi schema, version 4: producers notify only while the dispatcher waits.
--
-- A NOTIFY takes the database-wide notification lock at commit and holds it
-- through the commit's WAL flush, so every producer that notifies commits
-- one after another: an application calling pepsi.enqueue() at 8 or 32
-- connections ran at 0.4-0.5x the rate of the same transaction without it.
-- Now the dispatcher says in pepsi.wake whether it is waiting for a
-- notification (armed) or busy claiming and polling on its own (not armed),
-- and the ingress trigger notifies only while it is armed. Under a steady
-- feed the dispatcher is never idle long enough to arm, and producers never
-- notify; an idle dispatcher is woken by the first message as before.
--
-- The table is unlogged: the flag is the state of a running process, not
-- data. After a crash it is empty, which reads as armed (the safe side:
-- producers notify until a dispatcher says otherwise). Until a dispatcher
-- of this version runs, armed is true, as every statement notified before.
CREATE UNLOGGED TABLE pepsi.wake (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    armed boolean NOT NULL DEFAULT true
);
INSERT INTO pepsi.wake DEFAULT VALUES;

-- pepsi.armed() (the rule producers read), the ingress trigger's WHEN
-- that read it and pepsi.enqueue() in one statement were made here; they
-- are in sql/functions now (10_wake.sql, 20_ingress.sql, 20_enqueue.sql),
-- as later versions changed them.
