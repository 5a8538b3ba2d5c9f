-- The transitions a stage program makes from SQL (the SQL API), each
-- guarded by status = 'running' and, when the stage passes the pass token
-- it was handed (p_pass, see sql/023_pass.sql), by the row's pass being
-- that one: a move of a pass the dispatcher has given up (timed out,
-- settled, claimed again since) is refused. A message that is not running
-- (that pass) raises 55000 (object_not_in_prerequisite_state); a bad
-- argument 22023. Without p_pass a move is fenced by the status alone.
--
-- pepsi.advance() requeues the message itself: pending at p_stage, its
-- attempts at 0, its key there set, its pass booked requeued (ended,
-- ended_as: sql/023_pass.sql). The next stage's workers can be handed it
-- as soon as the stage commits, and the dispatcher's settle of the pass
-- finds it moved on and writes nothing: one row version a pass fewer than
-- a row left running for the settle to requeue. An advance to the stage
-- it was handed at is no move: the row stays running, and the settle
-- fails it as a pass that did not move its message.
DROP FUNCTION IF EXISTS pepsi.advance(bigint, text);
CREATE OR REPLACE FUNCTION pepsi.advance(p_id bigint, p_stage text, p_pass bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pepsi.stage_ok(p_stage) IS NOT TRUE THEN
        PERFORM pepsi.check_stage('pepsi.advance', p_stage);
    END IF;
    UPDATE pepsi.state_live s
       SET stage = p_stage, status = 'pending', attempts = 0, handed = NULL, updated_at = now(),
           ended = s.pass, ended_as = 'q',
           flow_key = CASE WHEN EXISTS (SELECT FROM pepsi.flow_keys) THEN
                          (SELECT pepsi.flow_key(m.headers ->> k.header) FROM pepsi.flow_keys k, pepsi.message m
                            WHERE m.id = s.id AND k.stage = p_stage) END
     WHERE s.id = p_id AND s.status = 'running' AND (p_pass IS NULL OR s.pass = p_pass)
       AND p_stage <> coalesce(s.handed, s.stage);
    IF NOT FOUND THEN
        -- Not running (that pass), or an advance to its own stage: no move.
        UPDATE pepsi.state_live s SET updated_at = now()
         WHERE s.id = p_id AND s.status = 'running' AND (p_pass IS NULL OR s.pass = p_pass);
    END IF;
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.advance', p_id, p_pass);
    END IF;
END $$;

-- pepsi.finish() may leave a result (p_result, at most 64 KiB): what a
-- join reads of its children (pepsi.children). NULL leaves none.
DROP FUNCTION IF EXISTS pepsi.finish(bigint);
DROP FUNCTION IF EXISTS pepsi.finish(bigint, bigint);
CREATE OR REPLACE FUNCTION pepsi.finish(p_id bigint, p_pass bigint DEFAULT NULL, p_result bytea DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF octet_length(p_result) > 65536 THEN
        RAISE EXCEPTION 'pepsi.finish: message %: a result of % bytes: want at most 65536', p_id, octet_length(p_result)
            USING ERRCODE = '22023';
    END IF;
    UPDATE pepsi.state SET status = 'done', updated_at = now(), result = p_result
     WHERE id = p_id AND status = 'running' AND (p_pass IS NULL OR pass = p_pass);
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.finish', p_id, p_pass);
    END IF;
END $$;

-- pepsi.pause() refuses a NULL or negative delay (it spun the message at
-- once, pass after pass), and one that ends after the year 9999
-- (pepsi.check_time).
DROP FUNCTION IF EXISTS pepsi.pause(bigint, interval);
CREATE OR REPLACE FUNCTION pepsi.pause(p_id bigint, p_delay interval, p_pass bigint DEFAULT NULL) RETURNS void
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
     WHERE id = p_id AND status = 'running' AND (p_pass IS NULL OR pass = p_pass);
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.pause', p_id, p_pass);
    END IF;
END $$;

-- pepsi.fail() keeps the first 8192 characters of a longer reason, and
-- says how many bytes it cut ("… [cut N bytes]", as the dispatcher cuts a
-- stage's long stderr line): a stage's fail must not itself fail for the
-- length of its reason, and every view of the queue reads the reason.
DROP FUNCTION IF EXISTS pepsi.fail(bigint, text);
CREATE OR REPLACE FUNCTION pepsi.fail(p_id bigint, p_reason text, p_pass bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF octet_length(p_reason) > 8192 THEN
        p_reason := pepsi.cut_reason(p_reason);
    END IF;
    UPDATE pepsi.state SET status = 'failed', error = p_reason, updated_at = now()
     WHERE id = p_id AND status = 'running' AND (p_pass IS NULL OR pass = p_pass);
    IF NOT FOUND THEN
        PERFORM pepsi.not_running('pepsi.fail', p_id, p_pass);
    END IF;
END $$;

-- pepsi.not_running raises the error of a move refused: the message is not
-- running, or (p_pass given) is running another pass than p_pass.
CREATE OR REPLACE FUNCTION pepsi.not_running(p_fn text, p_id bigint, p_pass bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_pass IS NOT NULL AND EXISTS (SELECT FROM pepsi.state_live WHERE id = p_id AND status = 'running') THEN
        RAISE EXCEPTION '%: message % is not running pass %: that pass is over', p_fn, p_id, p_pass USING ERRCODE = '55000';
    END IF;
    RAISE EXCEPTION '%: message % is not running', p_fn, p_id USING ERRCODE = '55000';
END $$;
