-- Retention of done messages: the ranges of pepsi.state_done.
--
-- pepsi.state_done is partitioned by updated_at (when the message became
-- done) into ranges named state_done_FROM_TO, their bounds in Unix
-- seconds, which the janitor creates ahead (pepsi.done_ahead) and drops
-- whole once RETENTION has passed (pepsi.expire_done), and a default
-- partition for what no range holds (RETENTION = 0, or a janitor that was
-- away), expired row by row.

-- pepsi.done_ahead creates the ranges of state_done, p_width each, that
-- cover from the end of the last one (or from the next second, when that
-- is past: the rows done in between are in the default partition) to
-- p_ahead widths past that, and returns how many it created. Each is
-- created as a partition of state_done, which takes ACCESS EXCLUSIVE on
-- state_done for as long as that takes (the default partition is scanned
-- for rows of the new range): the settle that moves rows there waits that
-- long. ATTACH PARTITION would not stop it, but PostgreSQL 15 plans a
-- statement concurrently with an ATTACH, and a generic plan made during
-- one can keep the partitions it knew for good: prepared
-- `SELECT count(*) FROM pepsi.state WHERE status = $1` answered 0 for 200
-- done rows, in 5 of 40 tries.
CREATE OR REPLACE FUNCTION pepsi.done_ahead(p_width interval, p_ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_step bigint := greatest(ceil(extract(epoch FROM p_width)), 1);
    v_now  bigint := ceil(extract(epoch FROM clock_timestamp()));
    v_from bigint;
    v_name text;
    v_n    integer := 0;
BEGIN
    SELECT max(split_part(c.relname, '_', 4)::bigint) INTO v_from
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pepsi.state_done'::regclass AND c.relname ~ '^state_done_[0-9]+_[0-9]+$';
    IF v_from IS NULL OR v_from < v_now THEN
        v_from := v_now + 1;
    END IF;
    WHILE v_from < v_now + 1 + p_ahead * v_step LOOP
        v_name := format('state_done_%s_%s', v_from, v_from + v_step);
        -- A lock not had soon (an autovacuum of the default partition, a
        -- reader holding it) or a done row of the default partition in
        -- the range: tried again at the next step.
        BEGIN
            PERFORM set_config('lock_timeout', '1s', true);
            EXECUTE format('CREATE TABLE pepsi.%I PARTITION OF pepsi.state_done FOR VALUES FROM (%L) TO (%L)',
                           v_name, to_timestamp(v_from), to_timestamp(v_from + v_step));
        EXCEPTION WHEN lock_not_available OR check_violation THEN
            RETURN v_n;
        END;
        v_from := v_from + v_step;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END $$;

-- pepsi.expire_done does one step of the retention sweep: in the oldest
-- range that ended longer than p_keep ago, it deletes the messages of the
-- next p_batch rows by id, and drops the range once they are all gone;
-- when no range has expired, it deletes, among the next p_batch rows of
-- the default partition, those done longer than p_keep ago. The next rows
-- are those after p_after when p_part, the partition the step before
-- worked in, is this step's (else from the first). part and last are
-- where the next step goes on, deleted the messages deleted, more whether
-- a next step has work. The messages of a range are deleted between the
-- bounds of their ids: without them each range of pepsi.message was
-- searched for every id of the batch (5 000 ids, 13 ranges: 47 ms, and
-- 30 ms of planning, against 12 ms unpartitioned); with them only the one
-- or two ranges that hold them are (4.5 ms of planning).
CREATE OR REPLACE FUNCTION pepsi.expire_done(p_keep interval, p_part text, p_after bigint, p_batch integer,
                                  OUT part text, OUT last bigint, OUT deleted bigint, OUT more boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
    v_ids  bigint[];
BEGIN
    SELECT c.relname INTO v_name
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pepsi.state_done'::regclass AND c.relname ~ '^state_done_[0-9]+_[0-9]+$'
       AND split_part(c.relname, '_', 4)::bigint <= extract(epoch FROM now() - p_keep)
     ORDER BY split_part(c.relname, '_', 4)::bigint
     LIMIT 1;
    PERFORM set_config('pepsi.expiring', 'on', true);
    part := coalesce(v_name, 'state_done_default');
    IF part IS DISTINCT FROM p_part THEN
        p_after := 0;
    END IF;
    IF v_name IS NOT NULL THEN
        -- A finished child whose parent is unfinished is what a join will
        -- read: it is kept, moved forward out of the range (its updated_at
        -- becomes now), and expires a RETENTION after that.
        EXECUTE format('SELECT array(SELECT c.id FROM pepsi.%I c WHERE c.parent IS NOT NULL
                                       AND EXISTS (SELECT FROM pepsi.state_live p WHERE p.id = c.parent))', v_name)
           INTO v_ids;
        IF cardinality(v_ids) > 0 THEN
            UPDATE pepsi.state SET updated_at = now() WHERE id = ANY (v_ids) AND status = 'done';
        END IF;
        EXECUTE format('SELECT array(SELECT id FROM pepsi.%I WHERE id > $1 ORDER BY id LIMIT $2)', v_name)
           INTO v_ids USING p_after, p_batch;
        DELETE FROM pepsi.message m
         WHERE m.id = ANY (v_ids) AND m.id BETWEEN v_ids[1] AND v_ids[cardinality(v_ids)];
        GET DIAGNOSTICS deleted = ROW_COUNT;
        more := true;
        IF cardinality(v_ids) = p_batch THEN
            last := v_ids[p_batch];
            RETURN;
        END IF;
        -- Dropping a partition takes ACCESS EXCLUSIVE on state_done: not
        -- waited for long, tried again at the next step.
        last := 0;
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            EXECUTE format('DROP TABLE pepsi.%I', v_name);
        EXCEPTION WHEN lock_not_available THEN
            last := coalesce(v_ids[cardinality(v_ids)], p_after);
        END;
        RETURN;
    END IF;
    WITH batch AS (
        SELECT id, updated_at FROM pepsi.state_done_default WHERE id > p_after ORDER BY id LIMIT p_batch
    ), gone AS (
        DELETE FROM pepsi.state_done_default s USING batch b
         WHERE s.id = b.id AND b.updated_at <= now() - p_keep
           AND NOT (s.parent IS NOT NULL AND EXISTS (SELECT FROM pepsi.state_live p WHERE p.id = s.parent))
        RETURNING s.id
    ), msg AS (
        DELETE FROM pepsi.message m USING gone g WHERE m.id = g.id RETURNING m.id
    )
    SELECT (SELECT max(id) FROM batch), (SELECT count(*) FROM msg) INTO last, deleted;
    last := coalesce(last, 0);
    more := last <> 0;
END $$;
