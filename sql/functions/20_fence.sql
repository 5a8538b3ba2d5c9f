-- The fence: the first statement of every transaction in which a
-- dispatcher writes the queue. It fails unless the dispatcher's lock
-- session still lives: that session holds the dispatcher's token lock
-- (p_token, a bigint advisory lock no other session takes), so a
-- transaction of another session can take it shared only once the lock
-- session is gone. And it takes each owned stage's fence lock shared for
-- the transaction: a dispatcher taking a stage over takes that lock
-- exclusive once, after the stage's own lock, so it waits for every
-- transaction of the old owner that passed the fence before it resets the
-- stage's running rows. A dispatcher whose lock session was terminated
-- (or that was frozen while its standby took over) thus writes nothing
-- more. Costs one function call and a few lock-table entries per
-- transaction; no row is read or written.
CREATE OR REPLACE FUNCTION pepsi.fence(p_token bigint, p_stages text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1885696102, hashtext(s)) FROM unnest(p_stages) s;  -- 'pepf'
    IF pg_try_advisory_xact_lock_shared(p_token) THEN
        RAISE EXCEPTION 'pepsi.fence: this dispatcher''s lock session is gone: it owns no stage'
            USING ERRCODE = '55P03';  -- lock_not_available
    END IF;
END $$;
