-- The transitions a stage program makes from SQL (the SQL API), each
-- guarded by status = 'running'. A message that is not running raises
-- 55000 (object_not_in_prerequisite_state); a bad argument 22023.
--
-- A running row belongs to the dispatcher that handed it out (handed),
-- even after pepsi.advance() moved it into another set's stage: the
-- dispatcher settles the pass and requeues it there.
CREATE OR REPLACE FUNCTION pepsi.advance(p_id bigint, p_stage text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pepsi.stage_ok(p_stage) IS NOT TRUE THEN
        PERFORM pepsi.check_stage('pepsi.advance', p_stage);
    END IF;
    UPDATE pepsi.state SET stage = p_stage, updated_at = now()
     WHERE id = p_id AND status = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pepsi.advance: message % is not running', p_id USING ERRCODE = '55000';
    END IF;
END $$;

CREATE OR REPLACE FUNCTION pepsi.finish(p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pepsi.state SET status = 'done', updated_at = now()
     WHERE id = p_id AND status = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pepsi.finish: message % is not running', p_id USING ERRCODE = '55000';
    END IF;
END $$;

-- pepsi.pause() refuses a NULL or negative delay (it spun the message at
-- once, pass after pass), and one that ends after the year 9999
-- (pepsi.check_time).
CREATE OR REPLACE FUNCTION pepsi.pause(p_id bigint, p_delay interval) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_delay IS NULL OR p_delay < interval '0' THEN
        RAISE EXCEPTION 'pepsi.pause: message %: the delay must be 0 or more, not %', p_id, coalesce(p_delay::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_delay > interval '1000 years' THEN
        PERFORM pepsi.check_time('pepsi.pause', 'p_delay', NULL, p_delay);
    END IF;
    UPDATE pepsi.state SET status = 'paused', timeout = now() + p_delay, updated_at = now()
     WHERE id = p_id AND status = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pepsi.pause: message % is not running', p_id USING ERRCODE = '55000';
    END IF;
END $$;

-- pepsi.fail() keeps the first 8192 characters of a longer reason, and
-- says how many bytes it cut ("… [cut N bytes]", as the dispatcher cuts a
-- stage's long stderr line): a stage's fail must not itself fail for the
-- length of its reason, and every view of the queue reads the reason.
CREATE OR REPLACE FUNCTION pepsi.fail(p_id bigint, p_reason text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF octet_length(p_reason) > 8192 THEN
        p_reason := pepsi.cut_reason(p_reason);
    END IF;
    UPDATE pepsi.state SET status = 'failed', error = p_reason, updated_at = now()
     WHERE id = p_id AND status = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pepsi.fail: message % is not running', p_id USING ERRCODE = '55000';
    END IF;
END $$;
