-- 0005: what a session's own provider turns cost and what its descendants' cost, in
-- micro-units (millionths) of the price table's currency, summed like its token usage (the
-- same transaction attributes both). Sessions stored before prices existed cost nothing.

ALTER TABLE sessions ADD COLUMN own_cost BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN attributed_cost BIGINT NOT NULL DEFAULT 0;
