//! Child names: how a parent addresses a child, how it shows in listings.
//!
//! A requested name is trimmed and must be 1–64 characters without control characters, and
//! not a broadcast alias (`*`, `all`, `broadcast`, any case). Without one, the child gets a
//! readable default, `subagent-<slug of its task>-<last 8 of its session id>`. Uniqueness among
//! siblings is the store's to enforce, atomically, when the child's record is created (the
//! guard across processes). Within a process a requested name is also reserved under its
//! parent at admission, before any await: a second spawn of the same name under the same
//! parent while the first is still registering (preflighting its model) is refused at once,
//! and the first goes on.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use arbor_protocol::SessionId;
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

use crate::error::{CoreError, CoreResult};
use crate::session::validate_session_name;

/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// Names that would address every agent at once.
const BROADCAST: [&str; 3] = ["*", "all", "broadcast"];

/// The requested name, checked and trimmed.
pub(crate) fn requested(name: &str) -> CoreResult<String> {
    let name = name.trim();
    if name.is_empty() {
        return Err(CoreError::invalid("name", "child name must not be empty"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(CoreError::invalid(
            "name",
            format!("child name must be at most {MAX_NAME_CHARS} characters"),
        ));
    }
    if BROADCAST.iter().any(|b| name.eq_ignore_ascii_case(b)) {
        return Err(CoreError::invalid(
            "name",
            "Broadcast agent messaging is not supported",
        ));
    }
    validate_session_name(name).map_err(|e| CoreError::invalid("name", e.to_string()))?;
    Ok(name.to_owned())
}

/// Names being registered in this process, keyed by (parent, name). Top-level children (no
/// parent session) are not reserved: the store does not hold their names unique either.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    held: Mutex<HashSet<(SessionId, String)>>,
}

impl Reservations {
    /// Reserves `name` under `parent` (whose children are at `depth`), or refuses it if a
    /// registration of that name under that parent is in progress. Synchronous.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        parent: Option<SessionId>,
        name: &str,
        depth: u32,
    ) -> CoreResult<ReservedName> {
        let Some(parent) = parent else {
            return Ok(ReservedName {
                name: name.to_owned(),
                held: None,
            });
        };
        let key = (parent, name.to_owned());
        let fresh = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone());
        if !fresh {
            return Err(CoreError::invalid(
                "name",
                format!(
                    "Agent name \"{name}\" is unavailable: an agent of that name is being \
                     spawned at depth {depth} under this parent"
                ),
            ));
        }
        Ok(ReservedName {
            name: name.to_owned(),
            held: Some((key, self.clone())),
        })
    }

    /// How many names are reserved now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A requested name, reserved under its parent; dropping it frees the reservation
/// (registration failed, was dropped, or the record now holds the name in the store).
#[derive(Debug)]
pub(crate) struct ReservedName {
    name: String,
    held: Option<((SessionId, String), Arc<Reservations>)>,
}

impl ReservedName {
    /// The name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ReservedName {
    fn drop(&mut self) {
        if let Some((key, owner)) = self.held.take() {
            owner
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
        }
    }
}

/// `subagent-<slug(task)>-<last 8 alphanumerics of the session id>`, at most 64 characters.
pub(crate) fn default_name(task: &str, session: SessionId) -> String {
    // The id's last group is 12 hex digits: its last 8 are the last 8 alphanumerics.
    let id = session.to_string();
    let suffix = id.get(id.len().saturating_sub(8)..).unwrap_or_default();
    let room = MAX_NAME_CHARS - "subagent-".len() - 1 - suffix.len();
    // NFKD, accents (combining marks) dropped, lowercased; every other run of characters that
    // are not ASCII letters or digits is one `-`. Only the slug's first `room` characters
    // are kept: a long task is read no further.
    let mut slug = String::with_capacity(room);
    let letters = task
        .nfkd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase);
    for c in letters {
        if slug.len() >= room {
            break;
        }
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    while slug.ends_with('-') {
        slug.pop();
    }
    if slug.is_empty() {
        slug.push_str("worker");
    }
    format!("subagent-{slug}-{suffix}")
}

/// Checks a supervisor or child id: `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`.
pub(crate) fn valid_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && id.len() <= 128
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

pub(crate) fn check_child_id(id: &str) -> CoreResult<()> {
    if valid_id(id) {
        Ok(())
    } else {
        Err(CoreError::invalid(
            "child_id",
            format!("Invalid child id: {id}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_per_parent_and_freed_on_drop() {
        let r = Arc::new(Reservations::default());
        let p = Some(SessionId::new());
        let held = r.reserve(p, "api", 1).unwrap();
        assert_eq!(held.name(), "api");
        let e = r.reserve(p, "api", 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Agent name \"api\" is unavailable: an agent of that name is being spawned at depth \
             1 under this parent"
        );
        let other_parent = r.reserve(Some(SessionId::new()), "api", 1).unwrap();
        // Top-level names are not unique in the store either: not reserved.
        let top = r.reserve(None, "api", 0).unwrap();
        assert!(r.reserve(None, "api", 0).is_ok());
        assert_eq!(r.len(), 2);
        drop((held, other_parent, top));
        assert_eq!(r.len(), 0);
        assert!(r.reserve(p, "api", 1).is_ok());
    }

    #[test]
    fn requested_names_are_trimmed_and_checked() {
        assert_eq!(requested("  api-review ").unwrap(), "api-review");
        for bad in ["", "   ", "ALL", "*", "Broadcast"] {
            assert!(requested(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            requested("all").unwrap_err().to_string(),
            "Broadcast agent messaging is not supported"
        );
        assert_eq!(
            requested(&"x".repeat(65)).unwrap_err().to_string(),
            "child name must be at most 64 characters"
        );
        assert!(requested(&"é".repeat(64)).is_ok());
        assert!(requested("a\nb").is_err());
    }

    #[test]
    fn default_names_slug_the_task_and_end_with_the_id() {
        let id: SessionId = "01a238b5-0000-7000-8000-0000a1b2c3d4".parse().unwrap();
        assert_eq!(
            default_name("Summarize the HTTP API!", id),
            "subagent-summarize-the-http-api-a1b2c3d4"
        );
        assert_eq!(default_name("!!!", id), "subagent-worker-a1b2c3d4");
        let long = default_name(&"word ".repeat(40), id);
        assert_eq!(long.chars().count(), 64, "{long}");
        assert!(long.ends_with("-a1b2c3d4"), "{long}");
        assert!(!long.contains("--"), "{long}");
        // A task far longer than a name is read only as far as the name needs.
        let huge = default_name(&format!("{} tail", "word ".repeat(20_000)), id);
        assert_eq!(huge, long);
        // NFKD-normalized, accents stripped (delegation contract, default names).
        assert_eq!(
            default_name("Ünïcode — and ASCII", id),
            "subagent-unicode-and-ascii-a1b2c3d4"
        );
        assert_eq!(
            default_name("Café Crème, ＦＵＬＬ width", id),
            "subagent-cafe-creme-full-width-a1b2c3d4"
        );
    }
}
