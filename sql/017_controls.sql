-- pepsi schema, version 17: the operator's controls (issue 37): scheduled
-- messages, paused stages, held and cancelled messages.
--
-- Scheduled messages need no table: a message enqueued to run later
-- (pepsi enqueue --at/--delay, pepsi.enqueue(p_run_at/p_delay)) waits as
-- paused, its timeout the time it runs, as a retry does, and the
-- dispatcher resumes it when it falls due (sql/functions/20_enqueue.sql).
--
-- 1. Paused stages: one row per stage that is handed nothing new (pepsi
-- queue pause, pepsi.pause_stage()). The claim skips them, so every
-- dispatcher honours a pause at its next claim, and a restart keeps it.
CREATE TABLE pepsi.paused_stages (
    stage     text PRIMARY KEY,
    paused_by text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    reason    text NOT NULL DEFAULT ''
);

-- 2. Held messages: a status of their own, 'held', in state_live beside
-- the other unfinished ones (pepsi queue hold, pepsi.hold()). Out of
-- state_pending and state_paused, a held message is never claimed nor
-- resumed; in state_flow and state_dedup it keeps its key's place under
-- KEY_LIMIT and its deduplication key. Its timeout stays as it was: a
-- release makes it paused again when it had one (a retry or a scheduled
-- message), else pending.
--
-- state_live's list of statuses grows by detaching it and attaching it
-- again; the attach reads state_live once to check its rows. The CHECK of
-- pepsi.state's statuses goes: checking a new one would read every done
-- and failed row under the lock, and the partitions' bounds refuse any
-- other status already (an INSERT or COPY into pepsi.state or straight
-- into a partition fails on a status no partition takes). The two partial
-- indexes that name the unfinished statuses are made again. All of it
-- under one ACCESS EXCLUSIVE lock of pepsi.state: on a populated database
-- a read of state_live and the two indexes' build, a second or so per
-- million unfinished messages; done and failed rows are not read.
LOCK TABLE pepsi.state IN ACCESS EXCLUSIVE MODE;
ALTER TABLE pepsi.state DETACH PARTITION pepsi.state_live;
ALTER TABLE pepsi.state DROP CONSTRAINT state_status_check;
ALTER TABLE pepsi.state_live DROP CONSTRAINT state_status_check;
ALTER TABLE pepsi.state ATTACH PARTITION pepsi.state_live FOR VALUES IN ('pending', 'running', 'paused', 'held');

DROP INDEX pepsi.state_flow;
CREATE INDEX state_flow ON pepsi.state_live (stage, flow_key, id)
    WHERE flow_key IS NOT NULL AND status IN ('pending', 'paused', 'held');
DROP INDEX pepsi.state_dedup;
CREATE UNIQUE INDEX state_dedup ON pepsi.state_live (dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running', 'paused', 'held');

-- 3. When the next paused message of a stage set falls due: state_paused
-- is in order of timeout across every stage, so a dispatcher of a few
-- stages walked past every paused message of the others (a million
-- messages scheduled at another set's stage: a million index entries read
-- at every wake). This one is read per stage (pkg/queue's resumeSQL).
CREATE INDEX state_paused_stage ON pepsi.state_live (stage, timeout) WHERE status = 'paused';
