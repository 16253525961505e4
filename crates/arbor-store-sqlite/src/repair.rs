//! Data fixes a migration needs before its SQL can run on stores older versions wrote.
//!
//! Migrations are never edited once shipped, but a constraint a later migration adds may not
//! hold on data an older arbor was allowed to write. Each fix here runs inside the migration's
//! transaction, right before the migration it prepares, changes as little as it can, and logs
//! every change it makes with a `tracing` warning.

use std::collections::{BTreeMap, HashSet};

use arbor_store::StoreResult;
use rusqlite::Connection;

use crate::error::SqlResultExt;

/// The longest session name arbor accepts, in characters.
const MAX_NAME_CHARS: usize = 64;

/// Before 0002 (which makes sibling names unique): renames same-named siblings written by
/// schema version 1, where they were allowed. Of each set of siblings sharing a name the
/// oldest (by creation time, then id) keeps it; each other one gets the first free
/// `name-N` (N from 2, the name shortened to stay within 64 characters) among its siblings.
pub(crate) fn unique_sibling_names(conn: &Connection, path: &str) -> StoreResult<()> {
    // parent -> its children's (name, id), oldest first within a name.
    let mut by_parent: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT parent_id, name, id FROM sessions WHERE parent_id IS NOT NULL \
                 ORDER BY parent_id, name, created_at, id",
            )
            .at(path)?;
        let mut rows = stmt.query([]).at(path)?;
        while let Some(row) = rows.next().at(path)? {
            let (parent, name, id): (String, String, String) = (
                row.get(0).at(path)?,
                row.get(1).at(path)?,
                row.get(2).at(path)?,
            );
            by_parent.entry(parent).or_default().push((name, id));
        }
    }
    let mut rename = conn
        .prepare("UPDATE sessions SET name = ?1 WHERE id = ?2")
        .at(path)?;
    for (parent, children) in &by_parent {
        let mut taken: HashSet<String> = children.iter().map(|(name, _)| name.clone()).collect();
        for pair in children.windows(2) {
            let [(previous, _), (name, id)] = pair else {
                continue;
            };
            if previous != name {
                continue;
            }
            let new_name = (2u64..)
                .map(|n| suffixed(name, n))
                .find(|candidate| !taken.contains(candidate))
                .unwrap_or_else(|| format!("{name}-{id}"));
            rename.execute([&new_name, id]).at(path)?;
            tracing::warn!(
                path,
                session = %id,
                parent = %parent,
                from = ?name,
                to = ?new_name,
                "renamed a session whose name a sibling had: sibling names are unique from \
                 schema version 2 on"
            );
            taken.insert(new_name);
        }
    }
    Ok(())
}

/// `name-n`, with `name` shortened so the result has at most [`MAX_NAME_CHARS`] characters.
fn suffixed(name: &str, n: u64) -> String {
    let suffix = format!("-{n}");
    let keep = MAX_NAME_CHARS.saturating_sub(suffix.chars().count());
    let base: String = name.chars().take(keep).collect();
    format!("{base}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_keep_names_within_the_limit() {
        assert_eq!(suffixed("kid", 2), "kid-2");
        let long = "é".repeat(64);
        let out = suffixed(&long, 10);
        assert_eq!(out.chars().count(), 64);
        assert!(out.ends_with("é-10"), "{out}");
    }
}
