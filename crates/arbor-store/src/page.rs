//! A page of roots ([`Store::roots_page`](crate::Store::roots_page)): newest first (creation
//! time, then id), after a cursor, filtered by status, creation time and strings their meta
//! holds. A cursor is the last root of the page before, so roots created meanwhile (newer)
//! never shift a later page: no root is listed twice or skipped.

use arbor_protocol::{SessionId, SessionStatus, Timestamp};

use crate::{SessionRecord, StoreError, StoreResult};

/// The most roots one page holds.
pub const MAX_PAGE_ROOTS: u32 = 1000;

/// Which roots [`Store::roots_page`](crate::Store::roots_page) returns. Build it with
/// [`RootPage::new`] and its setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RootPage {
    /// At most this many (1 to [`MAX_PAGE_ROOTS`]).
    pub limit: u32,
    /// Only roots listed after this one: older, or as old with a smaller id.
    pub after: Option<(Timestamp, SessionId)>,
    /// Only roots with this status.
    pub status: Option<SessionStatus>,
    /// Only roots created at or after this time.
    pub created_from: Option<Timestamp>,
    /// Only roots created before this time.
    pub created_before: Option<Timestamp>,
    /// Only roots whose meta holds the string `value` at each `path` (keys from the top).
    pub meta: Vec<(Vec<String>, String)>,
    /// Only roots whose meta holds the string `value` at each `path`, or nothing there
    /// (`null`): a default that records written before the key existed take.
    pub meta_or_absent: Vec<(Vec<String>, String)>,
}

impl RootPage {
    /// The newest `limit` roots.
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            after: None,
            status: None,
            created_from: None,
            created_before: None,
            meta: Vec::new(),
            meta_or_absent: Vec::new(),
        }
    }

    /// After this root (the last of the page before).
    #[must_use]
    pub fn after(mut self, created_at: Timestamp, id: SessionId) -> Self {
        self.after = Some((created_at, id));
        self
    }

    /// With this status.
    #[must_use]
    pub fn status(mut self, status: SessionStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Created at or after `at`.
    #[must_use]
    pub fn created_from(mut self, at: Timestamp) -> Self {
        self.created_from = Some(at);
        self
    }

    /// Created before `at`.
    #[must_use]
    pub fn created_before(mut self, at: Timestamp) -> Self {
        self.created_before = Some(at);
        self
    }

    /// Whose meta holds the string `value` at `path`.
    #[must_use]
    pub fn meta(mut self, path: &[&str], value: impl Into<String>) -> Self {
        self.meta
            .push((path.iter().map(|k| (*k).to_owned()).collect(), value.into()));
        self
    }

    /// Whose meta holds the string `value` at `path`, or nothing there.
    #[must_use]
    pub fn meta_or_absent(mut self, path: &[&str], value: impl Into<String>) -> Self {
        self.meta_or_absent
            .push((path.iter().map(|k| (*k).to_owned()).collect(), value.into()));
        self
    }

    /// `Invalid` for a limit out of range or a meta path whose key is not 1 to 64 of
    /// `a-z A-Z 0-9 _ -` (a path becomes part of a JSON path in the backends' queries).
    pub fn check(&self) -> StoreResult<()> {
        if self.limit == 0 || self.limit > MAX_PAGE_ROOTS {
            return Err(StoreError::Invalid(format!(
                "a page holds 1 to {MAX_PAGE_ROOTS} roots, not {}",
                self.limit
            )));
        }
        for (path, _) in self.meta.iter().chain(&self.meta_or_absent) {
            if path.is_empty() || !path.iter().all(|k| meta_key_is_valid(k)) {
                return Err(StoreError::Invalid(format!(
                    "meta path {path:?}: keys of 1 to 64 of a-z A-Z 0-9 _ -, not a number"
                )));
            }
        }
        // Backends keep times as signed 64-bit integers.
        let times = [
            self.after.map(|a| a.0),
            self.created_from,
            self.created_before,
        ];
        if let Some(t) = times.into_iter().flatten().find(|t| t.0 > i64::MAX as u64) {
            return Err(StoreError::Invalid(format!(
                "time {} is past the largest a store keeps ({})",
                t.0,
                i64::MAX
            )));
        }
        Ok(())
    }

    /// Whether `root` is on this page's side of the cursor and passes its filters.
    pub fn matches(&self, root: &SessionRecord) -> bool {
        root.parent_id.is_none()
            && self
                .after
                .is_none_or(|after| (root.created_at, root.id) < after)
            && self.status.is_none_or(|s| root.status == s)
            && self.created_from.is_none_or(|t| root.created_at >= t)
            && self.created_before.is_none_or(|t| root.created_at < t)
            && self
                .meta
                .iter()
                .all(|(path, value)| at(root, path).as_str() == Some(value.as_str()))
            && self.meta_or_absent.iter().all(|(path, value)| {
                let v = at(root, path);
                v.is_null() || v.as_str() == Some(value.as_str())
            })
    }
}

/// What `root`'s meta holds at `path` (`null` for nothing).
fn at<'a>(root: &'a SessionRecord, path: &[String]) -> &'a serde_json::Value {
    let mut at: &serde_json::Value = &root.meta;
    for key in path {
        at = &at[key.as_str()];
    }
    at
}

/// Whether `key` may be a key of a [`RootPage`]'s meta path: 1 to 64 of `a-z A-Z 0-9 _ -`,
/// and not a number (a JSON path would read it as an array's index).
pub fn meta_key_is_valid(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && key.trim_start_matches('-').parse::<u64>().is_err()
}
