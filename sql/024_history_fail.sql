-- pepsi schema, version 24: a retry keeps the reason it clears (issue 49).
--
-- pepsi queue retry (and the dashboard's Retry) clears a message's error
-- and dispatch_error. The reasons pepsi.history does not hold already are
-- written to it first, by the retry's own statement (pkg/admin's
-- keepReasonsSQL): a stage's pepsi.fail() reason (error, of a failed
-- message) as a row of a new kind, fail; a dispatch_error the history's
-- last row does not hold (a stage that answered 0 without moving its
-- message, an answer 75 with a reason, a failure from before schema 19)
-- as a row of kind answer. The kinds grow by 'fail'.
--
-- Cost: the CHECK is replaced NOT VALID under a brief ACCESS EXCLUSIVE
-- lock of pepsi.history, without reading it: every row passes the old
-- check, whose kinds the new one keeps, so none can fail the new one.
ALTER TABLE pepsi.history DROP CONSTRAINT history_kind_check;
ALTER TABLE pepsi.history ADD CONSTRAINT history_kind_check
    CHECK (kind IN ('answer', 'crash', 'timeout', 'protocol', 'fail')) NOT VALID;
