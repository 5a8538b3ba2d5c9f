-- pepsi schema, version 23: the pass token (issue 49).
--
-- A pass is one stage's work on a message, from the claim that hands it
-- out to the settle that books its outcome. Until now a pass was known by
-- its message and stage only, so a late verdict or a late move of an old
-- pass could act on a newer pass of the same message at the same stage (a
-- retry, a not-run put back, a message cancelled and retried). The claim
-- now stamps each pass with a token, pass, that no other pass of any
-- message shares: the dispatcher's run number (pepsi.pass_run, taken once
-- per run with a durable commit) times 2^40 plus its claim's number in
-- the run, so that a claim lost in a server crash (claims commit without
-- waiting for their flush) is never given again. Every writer of a pass's
-- outcome presents the token: the settle always, a stage's move
-- (pepsi.advance, finish, pause, fail) when it was given one.
--
-- ended and ended_as say how the last pass that ended was booked, and
-- which pass that was: the settle writes them with its outcome, and a
-- cancel of a running message writes 'c'. A settle sent again after its
-- answer was lost (it may have committed) finds there what its first
-- sending booked, even after the message was claimed again since, so that
-- every pass is counted once, in one place.
--   q requeued (pending at another stage)   r reset (pending at its stage)
--   p paused                                d done
--   f failed                                c cancelled
--
-- Cost: three columns with constant defaults (no rewrite), a sequence.
ALTER TABLE pepsi.state
    ADD COLUMN pass bigint NOT NULL DEFAULT 0,
    ADD COLUMN ended bigint NOT NULL DEFAULT 0,
    ADD COLUMN ended_as "char" NOT NULL DEFAULT '-';

CREATE SEQUENCE pepsi.pass_run;
