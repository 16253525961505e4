-- 0001: session records and their append-only transcripts.
--
-- Unsigned 64-bit counters (usage, context size, versions, timestamps) are stored as the
-- signed INTEGER with the same bits; every realistic value is below 2^63 and reads as itself.

CREATE TABLE sessions (
    id                            TEXT PRIMARY KEY NOT NULL,
    parent_id                     TEXT REFERENCES sessions (id),
    root_id                       TEXT NOT NULL,
    name                          TEXT NOT NULL,
    agent                         TEXT NOT NULL,
    model                         TEXT NOT NULL,
    depth                         INTEGER NOT NULL CHECK (depth >= 0),
    status                        TEXT NOT NULL,
    own_input_tokens              INTEGER NOT NULL DEFAULT 0,
    own_output_tokens             INTEGER NOT NULL DEFAULT 0,
    own_total_tokens              INTEGER NOT NULL DEFAULT 0,
    own_cache_read_tokens         INTEGER NOT NULL DEFAULT 0,
    own_cache_write_tokens        INTEGER NOT NULL DEFAULT 0,
    attributed_input_tokens       INTEGER NOT NULL DEFAULT 0,
    attributed_output_tokens      INTEGER NOT NULL DEFAULT 0,
    attributed_total_tokens       INTEGER NOT NULL DEFAULT 0,
    attributed_cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    attributed_cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    context_tokens                INTEGER NOT NULL DEFAULT 0,
    created_at                    INTEGER NOT NULL,
    updated_at                    INTEGER NOT NULL,
    meta                          TEXT NOT NULL DEFAULT 'null',
    version                       INTEGER NOT NULL
) STRICT;

-- Children(p) and Roots (parent_id IS NULL), oldest first.
CREATE INDEX sessions_by_parent ON sessions (parent_id, created_at, id);
-- Tree(r), oldest first.
CREATE INDEX sessions_by_root ON sessions (root_id, created_at, id);
-- mark_interrupted.
CREATE INDEX sessions_by_status ON sessions (status);

CREATE TABLE transcript_entries (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq        INTEGER NOT NULL CHECK (seq >= 1),
    at         INTEGER NOT NULL,
    run_id     TEXT NOT NULL,
    -- The entry's `kind` tag, also inside `body`.
    kind       TEXT NOT NULL,
    -- The `EntryKind` as JSON.
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;
