-- 0003: a tree's live children are counted across the whole tree (the supervisor contract's
-- maxActiveChildren is a global count over the tree, every depth), so claims look them up by
-- root.

CREATE INDEX child_runs_by_root ON child_runs (root_id, state);
