//! [`Store::census`](arbor_store::Store::census) in one query: sessions by the string their
//! root keeps at a key of its meta, root or not, and status, no record loaded.

use std::collections::HashMap;

use arbor_protocol::SessionStatus;
use arbor_store::{StatusCount, StoreError, StoreResult};

use crate::PostgresStore;
use crate::retry::retrying;

impl PostgresStore {
    pub(crate) async fn count_by_status(&self, key: &str) -> StoreResult<Vec<StatusCount>> {
        if !arbor_store::census_key_is_valid(key) {
            return Err(StoreError::Invalid(format!(
                "census key {key:?}: 1 to 64 of a-z A-Z 0-9 _"
            )));
        }
        let rows: Vec<(Option<String>, bool, String, i64)> = retrying!(self, async {
            Ok(sqlx::query_as(
                "SELECT CASE WHEN jsonb_typeof(r.meta::jsonb -> $1) = 'string' \
                        THEN r.meta::jsonb ->> $1 END, t.is_root, t.status, t.n \
                 FROM (SELECT root_id, parent_id IS NULL AS is_root, status, count(*) AS n \
                       FROM sessions GROUP BY root_id, parent_id IS NULL, status) t \
                 JOIN sessions r ON r.id = t.root_id",
            )
            .bind(key)
            .fetch_all(self.pool())
            .await?)
        })?;
        // One row per tree and status: summed per group.
        let mut counts: HashMap<(Option<String>, bool, &'static str), StatusCount> = HashMap::new();
        for (group, root, word, n) in rows {
            let status = SessionStatus::parse(&word)
                .ok_or_else(|| StoreError::Corrupt(format!("session status {word:?}")))?;
            counts
                .entry((group.clone(), root, status.as_str()))
                .or_insert(StatusCount {
                    group,
                    root,
                    status,
                    sessions: 0,
                })
                .sessions += u64::try_from(n).unwrap_or(0);
        }
        Ok(counts.into_values().collect())
    }
}
