//! The store's listing queries that read many rows and return few:
//! [`Store::census`](arbor_store::Store::census) (sessions by the string their root keeps at
//! a key of its meta, root or not, and status, no record loaded) and
//! [`Store::roots_page`](arbor_store::Store::roots_page) (a page of roots, newest first).

use std::collections::HashMap;

use arbor_protocol::SessionStatus;
use arbor_store::{RootPage, SessionRecord, StatusCount, StoreError, StoreResult};

use crate::PostgresStore;
use crate::retry::retrying;

impl PostgresStore {
    pub(crate) async fn count_by_status(&self, key: &str) -> StoreResult<Vec<StatusCount>> {
        if !arbor_store::census_key_is_valid(key) {
            return Err(StoreError::Invalid(format!(
                "census key {key:?}: 1 to 64 of a-z A-Z 0-9 _"
            )));
        }
        let rows: Vec<(Option<String>, bool, String, i64, i64)> = retrying!(self, async {
            Ok(sqlx::query_as(
                "SELECT grp, is_root, status, sum(n)::bigint, \
                        LEAST(sum(cost), 9223372036854775807)::bigint FROM ( \
                   SELECT CASE WHEN jsonb_typeof(m.j -> $1) = 'string' THEN m.j ->> $1 END AS grp, \
                          t.is_root, t.status, t.n, t.cost \
                   FROM (SELECT root_id, parent_id IS NULL AS is_root, status, count(*) AS n, \
                                sum(own_cost) AS cost \
                         FROM sessions GROUP BY root_id, parent_id IS NULL, status) t \
                   JOIN sessions r ON r.id = t.root_id \
                   CROSS JOIN LATERAL (SELECT r.meta::jsonb AS j) m) g \
                 GROUP BY grp, is_root, status",
            )
            .bind(key)
            .fetch_all(self.pool())
            .await?)
        })?;
        // One row per tree and status: summed per group.
        let mut counts: HashMap<(Option<String>, bool, &'static str), StatusCount> = HashMap::new();
        for (group, root, word, n, cost) in rows {
            let status = SessionStatus::parse(&word)
                .ok_or_else(|| StoreError::Corrupt(format!("session status {word:?}")))?;
            let at = counts
                .entry((group.clone(), root, status.as_str()))
                .or_insert(StatusCount {
                    group,
                    root,
                    status,
                    sessions: 0,
                    own_cost_micros: 0,
                });
            at.sessions += u64::try_from(n).unwrap_or(0);
            at.own_cost_micros = at
                .own_cost_micros
                .saturating_add(u64::try_from(cost).unwrap_or(0));
        }
        Ok(counts.into_values().collect())
    }
}

/// One bound value of a page's query.
enum Bound {
    Int(i64),
    Text(String),
    Path(Vec<String>),
}

impl PostgresStore {
    pub(crate) async fn page_of_roots(&self, page: &RootPage) -> StoreResult<Vec<SessionRecord>> {
        page.check()?;
        let mut filter = arbor_store::row::Filter::<Bound>::new("parent_id IS NULL", "$");
        let ms = |t: arbor_protocol::Timestamp| i64::try_from(t.0).unwrap_or(i64::MAX);
        if let Some((at, id)) = page.after {
            filter.and(
                "(created_at, id) < (#1, #2)",
                vec![Bound::Int(ms(at)), Bound::Text(id.to_string())],
            );
        }
        if let Some(status) = page.status {
            filter.and("status = #1", vec![Bound::Text(status.as_str().to_owned())]);
        }
        if let Some(at) = page.created_from {
            filter.and("created_at >= #1", vec![Bound::Int(ms(at))]);
        }
        if let Some(at) = page.created_before {
            filter.and("created_at < #1", vec![Bound::Int(ms(at))]);
        }
        for (keys, value) in &page.meta {
            filter.and(
                "jsonb_typeof(meta::jsonb #> #1::text[]) = 'string' \
                 AND meta::jsonb #>> #1::text[] = #2",
                vec![Bound::Path(keys.clone()), Bound::Text(value.clone())],
            );
        }
        for (keys, value) in &page.meta_or_absent {
            filter.and(
                "(meta::jsonb #> #1::text[] IS NULL \
                 OR jsonb_typeof(meta::jsonb #> #1::text[]) = 'null' \
                 OR (jsonb_typeof(meta::jsonb #> #1::text[]) = 'string' \
                     AND meta::jsonb #>> #1::text[] = #2))",
                vec![Bound::Path(keys.clone()), Bound::Text(value.clone())],
            );
        }
        let limit = filter.bind(Bound::Int(i64::from(page.limit)));
        let sql = format!(
            "SELECT {} FROM sessions WHERE {} ORDER BY created_at DESC, id DESC LIMIT {limit}",
            crate::codec::SESSION_COLUMNS,
            filter.sql()
        );
        let rows = retrying!(self, async {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
            for v in filter.values() {
                query = match v {
                    Bound::Int(n) => query.bind(*n),
                    Bound::Text(t) => query.bind(t.clone()),
                    Bound::Path(p) => query.bind(p.clone()),
                };
            }
            Ok(query.fetch_all(self.pool()).await?)
        })?;
        rows.iter().map(crate::codec::session_from_row).collect()
    }
}
