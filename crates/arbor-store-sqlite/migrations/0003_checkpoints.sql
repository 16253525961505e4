-- 0003: versioned checkpoints (a suspended run's state, a delegation mapping), written
-- compare-and-swap on `version`.

CREATE TABLE checkpoints (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    -- The value as JSON.
    value      TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) STRICT, WITHOUT ROWID;
