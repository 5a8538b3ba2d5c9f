-- pepsi schema, version 19: a message's history (issue 38, part 3).
--
-- Every failed pass of a message is a row here: the stage, the attempt
-- (the row's attempts at that pass), when the dispatcher settled it, how
-- it failed (kind: the stage answered non-zero, its worker crashed, timed
-- out or broke the protocol), the reason (as dispatch_error got it, cut
-- at 4 096 characters) and the worker: its process id, as the
-- dispatcher's log lines and the relayed stderr name it, and the host of
-- the dispatcher that ran it, since dispatchers on several hosts share one
-- database and a pid alone names no process.
--
-- Only failed passes are written: advances and finishes are what the queue
-- row and pepsi.message already store (created_at, attempts, stage,
-- status, updated_at), so the success path writes nothing more. The rows
-- are written by the dispatcher's settle, in its batch, by one statement
-- queued only when the batch settles a failed pass (pkg/queue/history.go).
--
-- The key is (id, n): n counts the message's recorded failed passes from 1,
-- so the rows of a message are one range of the primary key, read in
-- order by the message page, and kept to the last 20 by deleting n <= the
-- newest n - 20 in the statement that writes the newest. No foreign key
-- (it would cost every delete of a message a probe, like pepsi.state's):
-- the rows go with their message in the triggers of pepsi.message
-- (sql/functions/20_message_cascade.sql), which every delete of a message
-- passes: purge, retention and the drop of a done range alike.
--
-- Cost: a new, empty table; nothing is read or rewritten.
CREATE TABLE pepsi.history (
    id      bigint      NOT NULL, -- the message
    n       integer     NOT NULL, -- its failed passes, counted from 1
    at      timestamptz NOT NULL, -- when the dispatcher settled the pass
    stage   text        NOT NULL,
    attempt integer     NOT NULL, -- the row's attempts at the pass
    kind    text        NOT NULL CHECK (kind IN ('answer', 'crash', 'timeout', 'protocol')),
    reason  text        NOT NULL,
    pid     integer,              -- the worker's process id
    host    text,                 -- the host of the dispatcher that ran it
    PRIMARY KEY (id, n)
);
