-- pepsi.admit moves up to p_limit rows of pepsi.ingress (what
-- pepsi.enqueue() wrote) into pepsi.message and pepsi.state_live, pending
-- at their stage (updated_at: their enqueue time), and returns how many.
-- The dispatcher calls it at each of its polls, `pepsi queue` before it
-- reads. Rows another session is admitting are left to it. With nothing to
-- admit it inserts nothing: the ingress trigger would notify for nothing
-- (it fires for a statement that inserts no row).
CREATE OR REPLACE FUNCTION pepsi.admit(p_limit integer) RETURNS bigint
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
                ELSE (SELECT pepsi.flow_key(i.headers ->> k.header) FROM pepsi.flow_keys k WHERE k.stage = i.stage) END,
           i.created_at
      FROM i;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;
