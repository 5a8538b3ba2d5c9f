-- The operator's controls (schema 17), for pepsi queue pause, resume,
-- hold, release and cancel, the dashboard, and applications in SQL.
--
-- A paused stage (pepsi.paused_stages) is handed nothing new: the claim
-- skips it (pkg/queue's claimSQL), so every dispatcher honours a pause at
-- its next claim and a restart keeps it. Its running messages finish, and
-- messages go on arriving: they pile up pending. The reason takes at most
-- 1000 bytes and who paused it 255 (pepsi.check_text), as pepsi queue
-- pause and the dashboard take.
CREATE OR REPLACE FUNCTION pepsi.pause_stage(p_stage text, p_reason text DEFAULT '', p_by text DEFAULT session_user)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pepsi.check_stage('pepsi.pause_stage', p_stage);
    PERFORM pepsi.check_text('pepsi.pause_stage', 'p_reason', p_reason, 1000);
    PERFORM pepsi.check_text('pepsi.pause_stage', 'p_by', p_by, 255);
    INSERT INTO pepsi.paused_stages (stage, paused_by, reason)
    VALUES (p_stage, coalesce(nullif(p_by, ''), session_user), coalesce(p_reason, ''))
    ON CONFLICT (stage) DO NOTHING;
    RETURN FOUND; -- false: paused already (by whoever paused it first)
END $$;

-- pepsi.resume_stage() ends a pause and wakes the dispatchers, whose next
-- claim takes the stage's pending messages.
CREATE OR REPLACE FUNCTION pepsi.resume_stage(p_stage text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pepsi.paused_stages WHERE stage = p_stage;
    IF NOT FOUND THEN
        RETURN false; -- it was not paused
    END IF;
    PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    RETURN true;
END $$;

-- A held message (status 'held', as Postfix's hold queue) is never
-- claimed nor resumed until it is released. It keeps its place: its id,
-- its deduplication key, and its key's place at a stage with KEY (the
-- claim lets no later message of its key pass it, as for a pending or
-- paused one). pepsi.hold() holds the pending and paused messages of
-- p_ids and returns how many; others (running, finished, held already)
-- are left as they are. A paused message keeps its timeout.
CREATE OR REPLACE FUNCTION pepsi.hold(p_ids bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    UPDATE pepsi.state_live SET status = 'held', updated_at = now()
     WHERE id = ANY (p_ids) AND status IN ('pending', 'paused');
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- pepsi.release() puts the held messages of p_ids back: paused until
-- their timeout when they have one (a retry, a scheduled message; the
-- dispatcher resumes it at once if it is due), pending otherwise; it
-- wakes the dispatchers and returns how many.
CREATE OR REPLACE FUNCTION pepsi.release(p_ids bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    UPDATE pepsi.state_live SET status = CASE WHEN timeout IS NULL THEN 'pending' ELSE 'paused' END, updated_at = now()
     WHERE id = ANY (p_ids) AND status = 'held';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
    END IF;
    RETURN v_n;
END $$;

-- pepsi.cancel() ends the pending, paused, held and waiting messages of p_ids
-- cancelled (a status of its own: an operator's decision, not a stage's
-- failure), their error "cancelled by P_BY", and returns how many. A
-- cancelled message holds no deduplication key (state_dedup covers
-- unfinished ones only): the key is free again. With p_running, running
-- messages too: their pass goes on, but its outcome is ignored (the
-- dispatcher counts the pass cancelled), since the dispatcher's settle
-- leaves alone a row that is no longer running, and a stage's own
-- move (pepsi.advance, finish, pause, fail: guarded by status = 'running')
-- is refused, which rolls back the work of its transaction. The pass is
-- booked cancelled (ended_as 'c', sql/023_pass.sql), whatever comes of a
-- settle of it, and whether the message is retried first. It wakes the
-- dispatchers: a cancelled message may have held back its key's next one.
-- P_BY takes at most 255 bytes (pepsi.check_text).
CREATE OR REPLACE FUNCTION pepsi.cancel(p_ids bigint[], p_by text DEFAULT session_user, p_running boolean DEFAULT false)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_n       bigint;
    v_ids     bigint[];
    v_parents bigint[];
BEGIN
    PERFORM pepsi.check_text('pepsi.cancel', 'p_by', p_by, 255);
    WITH c AS (
        UPDATE pepsi.state SET status = 'cancelled', error = 'cancelled by ' || coalesce(nullif(p_by, ''), session_user),
                               timeout = NULL, updated_at = now(),
                               ended = CASE WHEN status = 'running' THEN pass ELSE ended END,
                               ended_as = CASE WHEN status = 'running' THEN 'c' ELSE ended_as END
         WHERE id = ANY (p_ids) AND (status IN ('pending', 'paused', 'held', 'waiting') OR p_running AND status = 'running')
        RETURNING id, parent
    )
    SELECT count(*), array_agg(c.id), array_agg(DISTINCT c.parent) FILTER (WHERE c.parent IS NOT NULL)
      INTO v_n, v_ids, v_parents FROM c;
    IF v_n > 0 THEN
        PERFORM pg_notify(s.ingress_channel, '') FROM pepsi.settings s;
        -- Graphs (sql/functions/30_graph.sql): the unfinished children of a
        -- cancelled message go with it; a cancelled child has ended, and may
        -- be the last its parent's join waited for.
        PERFORM pepsi.cancel_tree(v_ids, 'cancelled: its parent was cancelled');
        IF v_parents IS NOT NULL THEN
            PERFORM pepsi.joins(v_parents);
        END IF;
    END IF;
    RETURN v_n;
END $$;
