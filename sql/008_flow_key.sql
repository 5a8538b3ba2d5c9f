-- Per-key flow control (KEY, KEY_LIMIT in [stage-NAME]).
--
-- pepsi.flow_keys holds the keyed stages: a stage's dispatcher writes its
-- own rows at start (pepsi dispatch; nothing else writes them). A row's
-- flow_key is its key at its stage: the value of that stage's KEY header,
-- set when the row becomes pending there (pepsi.enqueue, COPY ingress, the
-- dispatcher's settle and resets, pepsi queue retry) and kept while it
-- runs or is paused there; NULL at a stage without KEY, or when the message
-- has no such header (no key, no limit). Those writers read pepsi.flow_keys
-- in their own transaction, so a dispatcher that changes it (under ACCESS
-- EXCLUSIVE) and then re-keys its stages' rows misses none.
--
-- state_flow answers the claim's question "is there an earlier pending or
-- paused message of this key at this stage?" with one probe. Only keyed
-- rows are in it; the column is catalog-only and the index starts empty,
-- so neither rewrites a populated table.
ALTER TABLE pepsi.state ADD COLUMN flow_key text;

CREATE TABLE pepsi.flow_keys (
    stage     text PRIMARY KEY,
    header    text NOT NULL,
    key_limit integer NOT NULL CHECK (key_limit >= 1)
);

CREATE INDEX state_flow ON pepsi.state (stage, flow_key, id)
    WHERE flow_key IS NOT NULL AND status IN ('pending', 'paused');

-- pepsi.enqueue and pepsi.enqueue_key set the key of the rows they
-- write (they were made again here; sql/functions/20_enqueue.sql has them
-- now).
