-- 0004: a child run's events, relayed by the worker that runs it to the process that streams
-- them (its parent's pump), in order. The parent reads them after a notification on
-- `arbor_child_events` (or by polling) and forgets them once the run has been reported.

CREATE TABLE child_events (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES child_runs (session_id) ON DELETE CASCADE,
    seq        BIGSERIAL,
    -- One event envelope (JSON), as the worker's session published it.
    event      TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
