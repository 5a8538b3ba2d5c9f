-- pepsi.flow_key() is the key a header value gives at a stage with KEY:
-- the value itself up to 256 bytes, else 'md5:' and the MD5 of the value.
-- The key goes into the index state_flow, whose entries PostgreSQL limits
-- to about 2.7 kB; a long key (a JWT, a URL) still keeps its messages in
-- order and apart from the others. Every writer of state.flow_key goes
-- through it.
CREATE OR REPLACE FUNCTION pepsi.flow_key(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(p_value) <= 256 THEN p_value ELSE 'md5:' || md5(p_value) END
$$;
