-- The bounds of what the SQL API stores, for every function that takes a
-- time or a free text: what is stored is read by every view of the queue
-- (pepsi queue, the dashboard, their JSON), which must be able to show it.

-- pepsi.check_time() refuses a time after the year 9999, given as p_at or
-- as p_delay from now: RFC 3339, and so JSON and the views of the queue,
-- cannot write it, and a message that waits so long is one to hold
-- (pepsi.hold). p_fn and p_arg name the function and its argument in the
-- error (SQLSTATE 22008, datetime_field_overflow).
CREATE OR REPLACE FUNCTION pepsi.check_time(p_fn text, p_arg text, p_at timestamptz, p_delay interval) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_delay IS NOT NULL THEN
        -- least(): now() + a longer delay could be past what timestamptz holds.
        p_at := now() + least(p_delay, interval '100000 years');
    END IF;
    IF p_at >= timestamptz '10000-01-01 00:00:00+00' THEN
        RAISE EXCEPTION '%: % % % after the year 9999: want a time before 10000-01-01 (hold the message instead)',
            p_fn, p_arg, coalesce(p_delay::text, p_at::text), CASE WHEN p_delay IS NULL THEN 'is' ELSE 'ends' END
            USING ERRCODE = '22008';
    END IF;
END $$;

-- pepsi.check_text() refuses a p_value of more than p_max bytes: an
-- operator's text (a pause's reason, who acted) that the views show
-- whole. p_fn and p_arg name the function and its argument in the error
-- (SQLSTATE 22023), as pepsi queue pause names its flag.
CREATE OR REPLACE FUNCTION pepsi.check_text(p_fn text, p_arg text, p_value text, p_max integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF octet_length(p_value) > p_max THEN
        RAISE EXCEPTION '%: % of % bytes: want at most %', p_fn, p_arg, octet_length(p_value), p_max
            USING ERRCODE = '22023';
    END IF;
END $$;

-- pepsi.cut_reason() is the first 8192 characters of p_reason, followed
-- by "… [cut N bytes]" when it is longer (pepsi.fail).
CREATE OR REPLACE FUNCTION pepsi.cut_reason(p_reason text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN length(p_reason) <= 8192 THEN p_reason
                ELSE left(p_reason, 8192) || '… [cut ' || octet_length(p_reason) - octet_length(left(p_reason, 8192)) || ' bytes]' END
$$;
