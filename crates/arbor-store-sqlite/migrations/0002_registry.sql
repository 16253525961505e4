-- 0002: what the child registry needs of a session record: where it was spawned from, the
-- replies it sent its parent, its tombstone; and sibling names unique among the living.

ALTER TABLE sessions ADD COLUMN spawned_run TEXT;
ALTER TABLE sessions ADD COLUMN spawned_turn INTEGER CHECK (spawned_turn >= 0);
ALTER TABLE sessions ADD COLUMN replies INTEGER NOT NULL DEFAULT 0 CHECK (replies >= 0);
-- The `Tombstone` as JSON, NULL while the session is not deleted.
ALTER TABLE sessions ADD COLUMN tombstone TEXT;

-- Children of one parent have distinct names until deleted (roots need not).
CREATE UNIQUE INDEX sessions_sibling_names ON sessions (parent_id, name)
    WHERE parent_id IS NOT NULL AND tombstone IS NULL;
