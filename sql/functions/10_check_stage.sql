-- pepsi.check_stage() refuses a stage name the rest of pepsi does not take
-- (1 to 63 bytes of letters, digits, '_', '-' and '.'; protocol.CheckStage):
-- a message at a stage no section can name could never be claimed. p_fn
-- names the caller in the error.
CREATE OR REPLACE FUNCTION pepsi.check_stage(p_fn text, p_stage text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_stage IS NULL OR p_stage = '' THEN
        RAISE EXCEPTION '%: stage must not be empty', p_fn USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_stage) > 63 OR p_stage !~ '^[A-Za-z0-9_.-]+$' THEN
        RAISE EXCEPTION '%: stage "%" is not a stage name: want 1 to 63 letters, digits, ''_'', ''-'' or ''.''',
            p_fn, left(p_stage, 80) USING ERRCODE = '22023';
    END IF;
END $$;
