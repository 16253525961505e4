-- 0002: child runs as claimable work. A delegation whose child runs in another process is a
-- row here; a worker claims it (FOR UPDATE SKIP LOCKED) under a lease it renews by heartbeat,
-- and another worker takes it over once the lease has run out. A parent's live claims are
-- counted under the same transaction that claims a slot, so `max_active` holds across every
-- process.

CREATE TABLE child_runs (
    session_id       TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id),
    parent_id        TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    root_id          TEXT COLLATE "C" NOT NULL,
    -- queued, claimed, done, failed, cancelled.
    state            TEXT NOT NULL
                     CHECK (state IN ('queued', 'claimed', 'done', 'failed', 'cancelled')),
    -- What a worker needs to run it (JSON): the host's business, opaque here.
    payload          TEXT NOT NULL,
    -- The parent's most live children at once, NULL for no limit.
    max_active       BIGINT CHECK (max_active >= 1),
    -- The claiming worker (JSON: host, pid, start) and until when its claim holds (ms).
    owner            TEXT,
    lease_until      BIGINT,
    -- Claims so far: a takeover is a second one.
    attempts         BIGINT NOT NULL DEFAULT 0,
    -- The outcome a worker reported (JSON), once done or failed.
    outcome          TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    enqueued_at      BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);

-- What is ready to claim, oldest first (queued, or claimed under a lease that ran out).
CREATE INDEX child_runs_open ON child_runs (enqueued_at) WHERE state IN ('queued', 'claimed');
-- A parent's live claims.
CREATE INDEX child_runs_by_parent ON child_runs (parent_id, state);
