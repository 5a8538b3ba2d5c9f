-- The wake flag: whether producers notify (see pkg/dispatch/wake.go).
--
-- A NOTIFY takes the database-wide notification lock at commit and holds
-- it through the commit's WAL flush, so every producer that notifies
-- commits one after another. So producers notify only while a dispatcher
-- waits for a notification (armed); one busy claiming and polling on its
-- own is not. pepsi.wake holds one row per dispatcher set (its stage set's
-- name, "*" for a dispatcher of every stage); pepsi.wake_armed, a
-- sequence, the number of armed dispatchers, which is what producers read.

-- pepsi.armed() is the one rule producers read. VOLATILE, as the sequence
-- it reads changes outside any transaction; so it is inlined where it is
-- called, and PL/pgSQL evaluates IF pepsi.armed() without a query. A
-- sequence never set (an unlogged one after a crash, as pepsi.wake is
-- emptied by one) reads as armed: producers notify until a dispatcher says
-- otherwise.
CREATE OR REPLACE FUNCTION pepsi.armed() RETURNS boolean
LANGUAGE sql VOLATILE AS $$ SELECT coalesce(pg_sequence_last_value('pepsi.wake_armed'), 1) <> 0 $$;

-- pepsi.arm writes set's wake flag and sets pepsi.wake_armed to the
-- number of armed dispatchers. The lock orders dispatchers that write at
-- once: each counts after the one before committed (a volatile function's
-- statements see what committed before each). The sequence is set before
-- the caller commits: an arm is seen at once (a producer notifies for
-- nothing until then, at worst), and so is a disarm (the dispatcher is
-- busy polling).
CREATE OR REPLACE FUNCTION pepsi.arm(p_set text, p_on boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE pepsi.wake IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO pepsi.wake (dispatcher, armed) VALUES (p_set, p_on)
        ON CONFLICT (dispatcher) DO UPDATE SET armed = excluded.armed WHERE pepsi.wake.armed <> excluded.armed;
    PERFORM setval('pepsi.wake_armed', (SELECT count(*) FROM pepsi.wake WHERE armed), true);
END $$;
