-- pepsi schema, version 3: the queue row loses its foreign key.
--
-- The key cost every enqueued row a lookup and a row lock of its message
-- (pepsi enqueue ran two to three times slower with it), and every claim of
-- a row settled earlier in the same transaction another lookup and lock.
-- pepsi writes a message's two rows together (pepsi enqueue, in one
-- transaction; pepsi.enqueue) and deletes them together (retention, purge):
-- statement-level triggers keep the cascade from message to state.
ALTER TABLE pepsi.state DROP CONSTRAINT state_id_fkey;

CREATE FUNCTION pepsi.message_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pepsi.state s USING gone g WHERE s.id = g.id;
    RETURN NULL;
END $$;

CREATE TRIGGER message_deleted AFTER DELETE ON pepsi.message
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION pepsi.message_deleted();

-- DELETE, not TRUNCATE: "TRUNCATE pepsi.state, pepsi.message" has emptied
-- both already, and may not truncate pepsi.state again.
CREATE FUNCTION pepsi.message_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pepsi.state;
    RETURN NULL;
END $$;

CREATE TRIGGER message_truncated AFTER TRUNCATE ON pepsi.message
    FOR EACH STATEMENT EXECUTE FUNCTION pepsi.message_truncated();
