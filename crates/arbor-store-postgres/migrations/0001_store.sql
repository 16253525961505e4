-- 0001: the store as SQLite's migrations 0001 to 0004 left it: session records with their
-- registry columns, their append-only transcripts, and versioned checkpoints.
--
-- Unsigned 64-bit counters (usage, context size, versions, timestamps) are stored as the
-- signed BIGINT with the same bits; every realistic value is below 2^63 and reads as itself.
-- Ids are their canonical text, whose byte order (COLLATE "C") is the ids' order. Meta,
-- tombstones and transcript bodies are JSON text, kept byte for byte.

CREATE TABLE sessions (
    id                            TEXT COLLATE "C" PRIMARY KEY,
    parent_id                     TEXT COLLATE "C" REFERENCES sessions (id),
    root_id                       TEXT COLLATE "C" NOT NULL,
    name                          TEXT NOT NULL,
    agent                         TEXT NOT NULL,
    model                         TEXT NOT NULL,
    depth                         BIGINT NOT NULL CHECK (depth >= 0),
    status                        TEXT NOT NULL,
    own_input_tokens              BIGINT NOT NULL DEFAULT 0,
    own_output_tokens             BIGINT NOT NULL DEFAULT 0,
    own_total_tokens              BIGINT NOT NULL DEFAULT 0,
    own_cache_read_tokens         BIGINT NOT NULL DEFAULT 0,
    own_cache_write_tokens        BIGINT NOT NULL DEFAULT 0,
    attributed_input_tokens       BIGINT NOT NULL DEFAULT 0,
    attributed_output_tokens      BIGINT NOT NULL DEFAULT 0,
    attributed_total_tokens       BIGINT NOT NULL DEFAULT 0,
    attributed_cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    attributed_cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    context_tokens                BIGINT NOT NULL DEFAULT 0,
    created_at                    BIGINT NOT NULL,
    updated_at                    BIGINT NOT NULL,
    meta                          TEXT NOT NULL DEFAULT 'null',
    version                       BIGINT NOT NULL,
    spawned_run                   TEXT COLLATE "C",
    spawned_turn                  BIGINT CHECK (spawned_turn >= 0),
    replies                       BIGINT NOT NULL DEFAULT 0 CHECK (replies >= 0),
    -- The `Tombstone` as JSON, NULL while the session is not deleted.
    tombstone                     TEXT,
    artifacts                     BIGINT NOT NULL DEFAULT 0 CHECK (artifacts >= 0)
);

-- Children(p) and Roots (parent_id IS NULL), oldest first.
CREATE INDEX sessions_by_parent ON sessions (parent_id, created_at, id);
-- Tree(r), oldest first.
CREATE INDEX sessions_by_root ON sessions (root_id, created_at, id);
-- mark_interrupted.
CREATE INDEX sessions_by_status ON sessions (status);
-- Children of one parent have distinct names until deleted (roots need not).
CREATE UNIQUE INDEX sessions_sibling_names ON sessions (parent_id, name)
    WHERE parent_id IS NOT NULL AND tombstone IS NULL;

CREATE TABLE transcript_entries (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    seq        BIGINT NOT NULL CHECK (seq >= 1),
    at         BIGINT NOT NULL,
    run_id     TEXT COLLATE "C" NOT NULL,
    -- The entry's `kind` tag, also inside `body`.
    kind       TEXT NOT NULL,
    -- The `EntryKind` as JSON.
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE checkpoints (
    namespace  TEXT COLLATE "C" NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    version    BIGINT NOT NULL CHECK (version >= 1),
    -- The value as JSON.
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);
