-- The failure groups' counts (sql/028_failure_groups.sql): a message that
-- enters pepsi.state_failed (a failed pass out of retries, a stage's
-- pepsi.fail(), a dispatcher's give-up), leaves it (retry, purge, cancel,
-- retention, its message deleted) or changes its stage or its errors
-- there writes +1 or -1 for its group to pepsi.failure_delta, by these
-- row triggers on that partition alone. A move between partitions is a
-- delete and an insert, whose AFTER triggers fire on each side; a
-- message that is not failed touches none of them.
CREATE OR REPLACE FUNCTION pepsi.failure_counted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO pepsi.failure_delta (stage, reason, n)
        VALUES (OLD.stage, regexp_replace(substr(coalesce(nullif(OLD.error, ''), nullif(OLD.dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g'), -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO pepsi.failure_delta (stage, reason, n)
        VALUES (NEW.stage, regexp_replace(substr(coalesce(nullif(NEW.error, ''), nullif(NEW.dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g'), 1);
    END IF;
    RETURN NULL;
END $$;

-- TRUNCATE of state_failed (or of pepsi.state, which truncates it)
-- empties the groups.
CREATE OR REPLACE FUNCTION pepsi.failures_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pepsi.failure_delta;
    DELETE FROM pepsi.failure_groups;
    RETURN NULL;
END $$;

-- pepsi.fold_failures() folds the deltas into pepsi.failure_groups, in one
-- statement (a reader sees the deltas or their sum, never both or
-- neither), and drops the groups left empty; it returns how many groups
-- it changed. The janitor's vacuum check calls it every VACUUM_INTERVAL.
CREATE OR REPLACE FUNCTION pepsi.fold_failures() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH d AS (DELETE FROM pepsi.failure_delta RETURNING stage, reason, n),
         s AS (SELECT stage, reason, sum(n) AS n FROM d GROUP BY 1, 2),
         up AS (INSERT INTO pepsi.failure_groups AS g (stage, reason, n)
                SELECT stage, reason, n FROM s
                ON CONFLICT (stage, reason) DO UPDATE SET n = g.n + excluded.n
                RETURNING 1)
    SELECT count(*) INTO v_n FROM up;
    IF v_n > 0 THEN
        DELETE FROM pepsi.failure_groups WHERE n = 0;
    END IF;
    RETURN v_n;
END $$;

-- The triggers, made again only when they differ from these (as
-- pg_get_triggerdef prints them). Whenever one is made, the groups are
-- counted again from state_failed, in this transaction, whose CREATE
-- TRIGGER holds off every write to state_failed until it commits: the
-- counts and the triggers start together.
DO $$
DECLARE
    v_t record;
    v_made boolean := false;
BEGIN
    FOR v_t IN SELECT * FROM (VALUES
        ('failure_entered',
         'CREATE TRIGGER failure_entered AFTER INSERT OR DELETE ON pepsi.state_failed FOR EACH ROW EXECUTE FUNCTION pepsi.failure_counted()'),
        ('failure_changed',
         'CREATE TRIGGER failure_changed AFTER UPDATE ON pepsi.state_failed FOR EACH ROW WHEN (((old.stage IS DISTINCT FROM new.stage) OR (old.error IS DISTINCT FROM new.error) OR (old.dispatch_error IS DISTINCT FROM new.dispatch_error))) EXECUTE FUNCTION pepsi.failure_counted()'),
        ('failures_truncated',
         'CREATE TRIGGER failures_truncated AFTER TRUNCATE ON pepsi.state_failed FOR EACH STATEMENT EXECUTE FUNCTION pepsi.failures_truncated()')
    ) t (name, def)
    LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = 'pepsi.state_failed'::regclass AND g.tgname = v_t.name
                                                         AND pg_get_triggerdef(g.oid) = v_t.def);
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON pepsi.state_failed', v_t.name);
        EXECUTE v_t.def;
        v_made := true;
    END LOOP;
    IF v_made THEN
        DELETE FROM pepsi.failure_delta;
        DELETE FROM pepsi.failure_groups;
        INSERT INTO pepsi.failure_groups (stage, reason, n)
        SELECT stage, regexp_replace(substr(coalesce(nullif(error, ''), nullif(dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g'), count(*)
          FROM pepsi.state_failed GROUP BY 1, 2;
    END IF;
END $$;
