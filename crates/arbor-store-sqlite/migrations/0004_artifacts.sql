-- 0004: artifacts a session wrote (successful calls of tools that declare they write one), so
-- the registry can tell a silent no-op (no reply and no artifact) from a child that did work.

ALTER TABLE sessions ADD COLUMN artifacts INTEGER NOT NULL DEFAULT 0 CHECK (artifacts >= 0);
