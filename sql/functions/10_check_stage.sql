-- pepsi.stage_ok() is the rule for a stage name the rest of pepsi takes
-- (1 to 63 bytes of letters, digits, '_', '-' and '.'; protocol.CheckStage):
-- a message at a stage no section can name could never be claimed. An
-- SQL function, inlined where it is called, so that the producers' and
-- stages' hot paths (pepsi.enqueue(), pepsi.advance()) test it as a
-- PL/pgSQL expression rather than run a query on every call, and call
-- pepsi.check_stage() only for a name it refuses, for the error.
CREATE OR REPLACE FUNCTION pepsi.stage_ok(p_stage text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT octet_length(p_stage) BETWEEN 1 AND 63 AND p_stage ~ '^[A-Za-z0-9_.-]+$' $$;

-- pepsi.check_stage() refuses a stage name pepsi.stage_ok() does not take,
-- saying why. p_fn names the caller in the error.
CREATE OR REPLACE FUNCTION pepsi.check_stage(p_fn text, p_stage text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_stage IS NULL OR p_stage = '' THEN
        RAISE EXCEPTION '%: stage must not be empty', p_fn USING ERRCODE = '22023';
    END IF;
    IF NOT pepsi.stage_ok(p_stage) THEN
        RAISE EXCEPTION '%: stage "%" is not a stage name: want 1 to 63 letters, digits, ''_'', ''-'' or ''.''',
            p_fn, left(p_stage, 80) USING ERRCODE = '22023';
    END IF;
END $$;
