//! Which session, child or approval a command-line argument names.
//!
//! A session is named by its full id, by `@latest` (or `-`) for the most recent root, or by
//! a unique piece of its id: a prefix of it (git-style) or the short id `arbor ls` shows.
//! Ids are UUIDv7: their leading 12 hex digits are the clock, so sessions made in the same
//! minute share a long prefix; the short id is the id's last 8 hex digits (random), and a
//! piece matches a session when its id starts *or ends* with it (dashes ignored, at least
//! [`MIN_PIECE`] hex digits). A piece that matches several sessions is refused, listing them;
//! one that matches none gets the unknown-session error.
//!
//! An approval id (`apr_…`, `sub_…`: 68 characters) is named by a unique prefix among the
//! calls that wait, with or without its `apr_`/`sub_` head.

use arbor_protocol::{SessionId, Timestamp};
use arbor_store::{SessionQuery, SessionRecord, Store};

use crate::fail::Fail;

/// The name of the most recent root session.
pub(crate) const LATEST: &str = "@latest";
/// The fewest hex digits a piece of an id may have.
pub(crate) const MIN_PIECE: usize = 4;
/// How many hex digits of an id its short form shows.
const SHORT: usize = 8;
/// How many candidates an ambiguity error lists.
const LISTED: usize = 8;

/// The short id `arbor ls` shows: the id's last 8 hex digits.
pub(crate) fn short(id: SessionId) -> String {
    let text = id.to_string();
    text[text.len().saturating_sub(SHORT)..].to_owned()
}

/// The session `text` names (see the module doc). A full id is returned as it is: the
/// command's own lookup says when it is unknown.
pub(crate) async fn session(store: &dyn Store, text: &str) -> Result<SessionId, Fail> {
    let text = text.trim();
    if text == LATEST || text == "-" {
        return latest_root(store).await;
    }
    if let Ok(id) = text.parse::<SessionId>() {
        return Ok(id);
    }
    let piece = piece(text)?;
    let roots = store
        .list_sessions(SessionQuery::Roots)
        .await
        .map_err(store_fail)?;
    let mut found: Vec<SessionRecord> = Vec::new();
    for root in &roots {
        if matches(root.id, &piece) {
            found.push(root.clone());
        }
        // A root's descendants share its tree; every session is in exactly one tree.
        for s in store
            .list_sessions(SessionQuery::Tree(root.id))
            .await
            .map_err(store_fail)?
        {
            if s.parent_id.is_some() && matches(s.id, &piece) {
                found.push(s);
            }
        }
    }
    one(text, "session", found)
}

/// The session an optional argument names: the most recent root when there is none.
pub(crate) async fn session_or_latest(
    store: &dyn Store,
    text: Option<&str>,
) -> Result<SessionId, Fail> {
    match text {
        Some(t) => session(store, t).await,
        None => latest_root(store).await,
    }
}

/// The most recent root session (by creation).
pub(crate) async fn latest_root(store: &dyn Store) -> Result<SessionId, Fail> {
    // The newest root alone, through the index: not every root the store ever held.
    let roots = store
        .list_sessions(SessionQuery::LatestRoots(1))
        .await
        .map_err(store_fail)?;
    roots
        .iter()
        .max_by_key(|r| (r.created_at, r.id))
        .map(|r| r.id)
        .ok_or_else(|| Fail::usage("the store holds no run yet (start one: arbor run SPEC)"))
}

/// The selector the registry understands for the child `selector` names under `parent`: its
/// name or full id as given, or, when no child has that name, the full id of the one child
/// whose id the piece (at least 8 hex digits: a short id) matches (`deleted`: deleted
/// children count too).
pub(crate) async fn child(
    store: &dyn Store,
    parent: SessionId,
    selector: &str,
    deleted: bool,
) -> Result<String, Fail> {
    let trimmed = selector.trim();
    if trimmed.parse::<SessionId>().is_ok() {
        return Ok(selector.to_owned());
    }
    let kids = store
        .list_sessions(SessionQuery::Children(parent))
        .await
        .map_err(store_fail)?;
    let alive = |r: &&SessionRecord| deleted || r.tombstone.is_none();
    if kids.iter().filter(alive).any(|r| r.name == selector) {
        return Ok(selector.to_owned());
    }
    // A child's name may look like hex (`beef`): only a piece as long as a short id names a
    // child by its id, so a mistyped name is not taken for another child's id.
    let Some(piece) = piece(trimmed).ok().filter(|p| p.len() >= SHORT) else {
        return Ok(selector.to_owned());
    };
    let found: Vec<SessionRecord> = kids
        .iter()
        .filter(alive)
        .filter(|r| matches(r.id, &piece))
        .cloned()
        .collect();
    if found.is_empty() {
        // The registry's own unknown-child answer.
        return Ok(selector.to_owned());
    }
    Ok(one(trimmed, "child", found)?.to_string())
}

/// The waiting approval `text` names among `pending` (ids of calls that wait): the id itself,
/// or a unique prefix, with or without its `apr_`/`sub_` head. A piece that names none is
/// returned as it is, for the caller's unknown-approval answer.
pub(crate) fn approval<'a>(
    pending: impl IntoIterator<Item = &'a str>,
    text: &str,
) -> Result<String, Fail> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    let mut found: Vec<&str> = Vec::new();
    for id in pending {
        if id == text {
            return Ok(text.to_owned());
        }
        let bare = id.split_once('_').map_or(id, |(_, rest)| rest);
        if text.len() >= MIN_PIECE
            && (id.starts_with(&lower) || bare.starts_with(&lower))
            && !found.contains(&id)
        {
            found.push(id);
        }
    }
    match found.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Ok(text.to_owned()),
        many => {
            let listed: Vec<&str> = many.iter().take(LISTED).copied().collect();
            Err(Fail::usage(format!(
                "approval {text:?} is ambiguous: it starts {} waiting ids: {}{}",
                many.len(),
                listed.join(", "),
                more(many.len())
            )))
        }
    }
}

/// A piece of an id, as lowercase hex digits without dashes; refused when it cannot be one.
fn piece(text: &str) -> Result<String, Fail> {
    let digits: String = text
        .chars()
        .filter(|c| *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if digits.len() < MIN_PIECE || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Fail::usage(format!(
            "not a session: {text:?} (give a session id, at least {MIN_PIECE} of its hex \
             digits from its start or end, or {LATEST})"
        )));
    }
    Ok(digits)
}

fn matches(id: SessionId, piece: &str) -> bool {
    let digits: String = id.to_string().chars().filter(|c| *c != '-').collect();
    digits.starts_with(piece) || digits.ends_with(piece)
}

fn one(text: &str, what: &str, mut found: Vec<SessionRecord>) -> Result<SessionId, Fail> {
    match found.len() {
        1 => Ok(found[0].id),
        0 => Err(Fail::usage(format!(
            "unknown {what} {text:?}: no {what} id starts or ends with it"
        ))),
        n => {
            found.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.id)));
            let now = Timestamp::now();
            let listed: Vec<String> = found
                .iter()
                .take(LISTED)
                .map(|r| {
                    format!(
                        "{} ({}, {}, {})",
                        r.id,
                        r.name,
                        r.status,
                        age(now, r.created_at)
                    )
                })
                .collect();
            Err(Fail::usage(format!(
                "{what} {text:?} is ambiguous: it matches {n} sessions: {}{}; give more digits",
                listed.join("; "),
                more(n)
            )))
        }
    }
}

fn more(n: usize) -> String {
    if n > LISTED {
        format!(" and {} more", n - LISTED)
    } else {
        String::new()
    }
}

/// How long ago `then` was, in the largest whole unit: `12s ago`, `5m ago`, `3h ago`,
/// `2d ago`.
pub(crate) fn age(now: Timestamp, then: Timestamp) -> String {
    let s = now.0.saturating_sub(then.0) / 1000;
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

fn store_fail(e: arbor_store::StoreError) -> Fail {
    Fail::store(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_hex_digits_without_dashes() {
        assert_eq!(piece("AB-cd").ok().as_deref(), Some("abcd"));
        let short = piece("abc").err().map(|f| f.message);
        assert!(short.is_some_and(|m| m.contains("at least 4")));
        assert!(piece("root").is_err());
    }

    #[test]
    fn a_piece_matches_the_start_or_the_end() {
        let id = SessionId::new();
        let text = id.to_string();
        assert!(matches(id, &piece(&text[..6]).unwrap()));
        assert!(matches(id, &piece(&short(id)).unwrap()));
        assert_eq!(short(id).len(), 8);
        assert!(!matches(id, "zzzz"));
    }

    #[test]
    fn approvals_by_prefix_with_or_without_the_head() {
        let ids = ["apr_1234aaaa", "apr_1234bbbb", "sub_99cc"];
        assert_eq!(
            approval(ids, "apr_1234a").ok().as_deref(),
            Some("apr_1234aaaa")
        );
        assert_eq!(approval(ids, "99cc").ok().as_deref(), Some("sub_99cc"));
        assert_eq!(approval(ids, "sub_99cc").ok().as_deref(), Some("sub_99cc"));
        let err = approval(ids, "1234")
            .err()
            .map(|f| f.message)
            .unwrap_or_default();
        assert_eq!(
            err,
            "approval \"1234\" is ambiguous: it starts 2 waiting ids: apr_1234aaaa, apr_1234bbbb"
        );
        // Too short, or naming nothing: left for the unknown-approval answer.
        assert_eq!(approval(ids, "12").ok().as_deref(), Some("12"));
        assert_eq!(approval(ids, "ffff").ok().as_deref(), Some("ffff"));
    }

    #[test]
    fn ages_in_the_largest_unit() {
        let t = |s: u64| age(Timestamp(s * 1000 + 5), Timestamp(5));
        assert_eq!(t(12), "12s ago");
        assert_eq!(t(300), "5m ago");
        assert_eq!(t(3 * 3600), "3h ago");
        assert_eq!(t(2 * 86_400 + 7), "2d ago");
    }
}
