//! `list_sessions`: its order (oldest first) and its scopes (roots, children, a tree, the
//! newest roots, a status).

use arbor_protocol::{SessionId, SessionStatus, Timestamp};

use super::{child, create, root};
use crate::{SessionQuery, SessionRecord, Store};

fn ids(records: &[SessionRecord]) -> Vec<SessionId> {
    records.iter().map(|r| r.id).collect()
}

fn assert_sorted(backend: &str, what: &str, records: &[SessionRecord]) {
    let sorted = records
        .windows(2)
        .all(|w| (w[0].created_at, w[0].id) < (w[1].created_at, w[1].id));
    assert!(
        sorted,
        "[{backend}] list_sessions: {what} is not oldest first: {:?}",
        ids(records)
    );
}

/// The sessions [`list_sessions_orders_and_scopes`] lists: three roots, three children of
/// `r2`, a grandchild under each of `c1` and `c2`, a child of `r1`.
struct Listed {
    r1: SessionRecord,
    r2: SessionRecord,
    r3: SessionRecord,
    c1: SessionRecord,
    c2: SessionRecord,
    c3: SessionRecord,
    g1: SessionRecord,
    g2: SessionRecord,
    d1: SessionRecord,
}

/// Creates the [`Listed`] sessions, their creation times out of id order, in an order
/// neither by id nor by time.
async fn seed_listing(store: &dyn Store, check: &str) -> Listed {
    let base = 1_800_000_000_000;
    let at = |offset: u64| Timestamp(base + offset);

    // Ids are time-ordered: r1 < r2 < r3 and c1 < c2 < c3.
    let (mut r1, mut r2, mut r3) = (root("r1"), root("r2"), root("r3"));
    r1.created_at = at(20);
    r2.created_at = at(10);
    r3.created_at = at(10);
    for r in [&r3, &r1, &r2] {
        create(store, check, r).await;
    }
    let (mut c1, mut c2, mut c3) = (child(&r2, "c1"), child(&r2, "c2"), child(&r2, "c3"));
    c1.created_at = at(30);
    c2.created_at = at(15);
    c3.created_at = at(15);
    for c in [&c3, &c1, &c2] {
        create(store, check, c).await;
    }
    let mut g1 = child(&c1, "g1");
    g1.created_at = at(40);
    let mut g2 = child(&c2, "g2");
    g2.created_at = at(35);
    let mut d1 = child(&r1, "d1");
    d1.created_at = at(25);
    for s in [&g1, &g2, &d1] {
        create(store, check, s).await;
    }
    Listed {
        r1,
        r2,
        r3,
        c1,
        c2,
        c3,
        g1,
        g2,
        d1,
    }
}

/// `list_sessions` returns sessions oldest first (creation time, then id) and scopes them:
/// `Roots` only roots, `Children(p)` only `p`'s direct children, `Tree(r)` the root `r` and
/// all its descendants, nothing of other trees.
pub async fn list_sessions_orders_and_scopes(store: &dyn Store) {
    const CHECK: &str = "list_sessions_orders_and_scopes";
    let b = store.backend();
    let Listed {
        r1,
        r2,
        r3,
        c1,
        c2,
        c3,
        g1,
        g2,
        d1,
    } = seed_listing(store, CHECK).await;

    let list = |query| async move {
        store
            .list_sessions(query)
            .await
            .unwrap_or_else(|e| panic!("[{b}] {CHECK}: list_sessions({query:?}) failed: {e}"))
    };

    let roots = list(SessionQuery::Roots).await;
    assert_sorted(b, "Roots", &roots);
    assert!(
        roots.iter().all(|r| r.parent_id.is_none()),
        "[{b}] {CHECK}: Roots holds a child"
    );
    let ours: Vec<SessionRecord> = roots
        .into_iter()
        .filter(|r| [r1.id, r2.id, r3.id].contains(&r.id))
        .collect();
    assert_eq!(
        ours,
        vec![r2.clone(), r3.clone(), r1.clone()],
        "[{b}] {CHECK}: Roots"
    );

    // The newest roots, through the index, oldest first; a status through its index.
    let all_roots = list(SessionQuery::Roots).await;
    for n in [1usize, 2] {
        let latest = list(SessionQuery::LatestRoots(n as u32)).await;
        let tail = &all_roots[all_roots.len().saturating_sub(n)..];
        assert_eq!(
            ids(&latest),
            ids(tail),
            "[{b}] {CHECK}: LatestRoots({n}) is not the newest {n} roots, oldest first"
        );
    }
    let with_status = list(SessionQuery::Status(r1.status)).await;
    assert!(
        with_status.iter().all(|s| s.status == r1.status),
        "[{b}] {CHECK}: Status({}) holds another status",
        r1.status
    );
    for ours in [&r1, &r2, &r3, &c1, &c2, &c3, &g1, &g2, &d1] {
        assert_eq!(
            with_status.iter().any(|s| s.id == ours.id),
            ours.status == r1.status,
            "[{b}] {CHECK}: Status({}) and session {}",
            r1.status,
            ours.id
        );
    }

    let cases = [
        (
            "Children(r2)",
            SessionQuery::Children(r2.id),
            vec![&c2, &c3, &c1],
        ),
        ("Children(c1)", SessionQuery::Children(c1.id), vec![&g1]),
        ("Children(c2)", SessionQuery::Children(c2.id), vec![&g2]),
        ("Children(r1)", SessionQuery::Children(r1.id), vec![&d1]),
        ("Children(r3)", SessionQuery::Children(r3.id), vec![]),
        ("Children(g1)", SessionQuery::Children(g1.id), vec![]),
        (
            "Children(unknown)",
            SessionQuery::Children(SessionId::new()),
            vec![],
        ),
        (
            "Tree(r2)",
            SessionQuery::Tree(r2.id),
            vec![&r2, &c2, &c3, &c1, &g2, &g1],
        ),
        ("Tree(r1)", SessionQuery::Tree(r1.id), vec![&r1, &d1]),
        ("Tree(r3)", SessionQuery::Tree(r3.id), vec![&r3]),
        (
            "Tree(unknown)",
            SessionQuery::Tree(SessionId::new()),
            vec![],
        ),
    ];
    for (label, query, expected) in cases {
        let got = list(query).await;
        let expected: Vec<SessionRecord> = expected.into_iter().cloned().collect();
        assert_eq!(
            ids(&got),
            ids(&expected),
            "[{b}] {CHECK}: {label} returned the wrong sessions or order"
        );
        assert_eq!(got, expected, "[{b}] {CHECK}: {label} records differ");
    }
}

/// `census` counts sessions by the group their root's `meta[key]` names, root or not, and
/// status, with the sum of their own cost; a tree whose root names none is in the `None`
/// group; a bad key is `Invalid`.
pub async fn census_counts_by_group_root_and_status(store: &dyn Store) {
    let backend = store.backend();
    let check = "census_counts_by_group_root_and_status";
    // A group no other check uses, so the store's other sessions do not count in it.
    let group = format!("g{}", SessionId::new().to_string().replace('-', ""));
    let mut a = root("census-a");
    a.meta = serde_json::json!({"tenant": group, "other": 1}).into();
    a.own_cost = 100;
    let mut b = root("census-b");
    b.meta = serde_json::json!({"tenant": group}).into();
    b.status = SessionStatus::Succeeded;
    create(store, check, &a).await;
    create(store, check, &b).await;
    let mut c1 = child(&a, "c1");
    c1.status = SessionStatus::Running;
    c1.own_cost = 20;
    let mut c2 = child(&a, "c2");
    c2.own_cost = 3;
    create(store, check, &c1).await;
    create(store, check, &c2).await;
    let mut g = child(&c1, "g");
    g.own_cost = 4;
    create(store, check, &g).await;
    let mut d = child(&b, "d");
    d.status = SessionStatus::Failed;
    create(store, check, &d).await;
    // Another tree, whose root names no group.
    let plain = root("census-plain");
    create(store, check, &plain).await;

    let rows = match store.census("tenant").await {
        Ok(rows) => rows,
        Err(e) => panic!("[{backend}] {check}: census failed: {e}"),
    };
    let mut mine: Vec<(bool, &str, u64, u64)> = rows
        .iter()
        .filter(|r| r.group.as_deref() == Some(group.as_str()))
        .map(|r| (r.root, r.status.as_str(), r.sessions, r.own_cost_micros))
        .collect();
    mine.sort_unstable();
    assert_eq!(
        mine,
        [
            (false, "failed", 1, 0),
            (false, "idle", 2, 7),
            (false, "running", 1, 20),
            (true, "idle", 1, 100),
            (true, "succeeded", 1, 0),
        ],
        "[{backend}] {check}: the group's rows"
    );
    assert!(
        rows.iter().any(|r| r.group.is_none()
            && r.root
            && r.status == SessionStatus::Idle
            && r.sessions >= 1),
        "[{backend}] {check}: a root without the key is in the None group: {rows:?}"
    );
    for bad in ["", "a.b", "a'b", "tenant)"] {
        match store.census(bad).await {
            Err(e) => assert_eq!(
                e.kind(),
                crate::StoreErrorKind::Invalid,
                "[{backend}] {check}: key {bad:?}: {e}"
            ),
            Ok(_) => panic!("[{backend}] {check}: key {bad:?} was accepted"),
        }
    }
}

/// How many newer roots the paging loop of [`roots_page_pages_newest_first_and_filters`]
/// made: one per page read (three pages of two).
fn made_newer(seen: &[SessionId]) -> usize {
    seen.len().div_ceil(2)
}

/// `roots_page` lists roots newest first (creation time, then id), pages through them by
/// cursor without a repeat or a gap while newer roots arrive, and filters by status,
/// creation time and strings the meta holds; a bad page is `Invalid`.
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
pub async fn roots_page_pages_newest_first_and_filters(store: &dyn Store) {
    use crate::RootPage;
    let backend = store.backend();
    let check = "roots_page_pages_newest_first_and_filters";
    // A tag no other check uses, so the store's other roots do not count.
    let tag = format!("t{}", SessionId::new().to_string().replace('-', ""));
    let base = 1_900_000_000_000;
    let mut made = Vec::new();
    for (i, offset) in [30u64, 10, 20, 20, 40, 50].into_iter().enumerate() {
        let mut r = root(&format!("page-{i}"));
        r.created_at = Timestamp(base + offset);
        r.status = if i % 2 == 0 {
            SessionStatus::Succeeded
        } else {
            SessionStatus::Failed
        };
        let user = if i < 3 { "ann" } else { "bob" };
        r.meta = serde_json::json!({"tag": tag, "labels": {"user": user}, "n": i}).into();
        create(store, check, &r).await;
        made.push(r);
    }
    // Newest first: 50, 40, then the two at 20 by id descending, 30 ... sorted.
    let mut expected: Vec<&SessionRecord> = made.iter().collect();
    expected.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.id)));
    let expected: Vec<SessionId> = expected.iter().map(|r| r.id).collect();

    // A child with the tag is never a root of a page.
    let mut child_of = child(&made[0], "page-child");
    child_of.meta = serde_json::json!({"tag": tag}).into();
    create(store, check, &child_of).await;
    let page = |limit| RootPage::new(limit).meta(&["tag"], tag.clone());
    let read = |p: RootPage| async move {
        match store.roots_page(&p).await {
            Ok(rows) => rows,
            Err(e) => panic!("[{backend}] {check}: roots_page failed: {e}"),
        }
    };
    let mut seen = Vec::new();
    let mut cursor: Option<(Timestamp, SessionId)> = None;
    loop {
        let mut p = page(2);
        if let Some((at, id)) = cursor {
            p = p.after(at, id);
        }
        let rows = read(p).await;
        if rows.is_empty() {
            break;
        }
        // A newer root arrives between pages: it never shows on a later page.
        let mut newer = root("page-newer");
        newer.meta = serde_json::json!({"tag": tag}).into();
        newer.created_at = Timestamp(base + 100 + seen.len() as u64);
        create(store, check, &newer).await;
        let last = &rows[rows.len() - 1];
        cursor = Some((last.created_at, last.id));
        seen.extend(rows.iter().map(|r| r.id));
    }
    assert_eq!(
        seen, expected,
        "[{backend}] {check}: pages in order, no repeat, no gap"
    );

    let ids = |rows: Vec<SessionRecord>| rows.iter().map(|r| r.id).collect::<Vec<_>>();
    let failed = ids(read(page(10).status(SessionStatus::Failed)).await);
    assert_eq!(failed.len(), 3, "[{backend}] {check}: by status");
    let bobs = ids(read(page(10).meta(&["labels", "user"], "bob")).await);
    let want: Vec<SessionId> = expected
        .iter()
        .copied()
        .filter(|id| {
            made.iter()
                .position(|r| r.id == *id)
                .is_some_and(|i| i >= 3)
        })
        .collect();
    assert_eq!(bobs, want, "[{backend}] {check}: by a label");
    let window = ids(read(
        page(10)
            .created_from(Timestamp(base + 20))
            .created_before(Timestamp(base + 40)),
    )
    .await);
    assert_eq!(window.len(), 3, "[{backend}] {check}: by creation time");
    // Or absent: the roots without labels (the newer ones) and ann's.
    let anns_or_none = ids(read(page(20).meta_or_absent(&["labels", "user"], "ann")).await);
    assert_eq!(
        anns_or_none.len(),
        3 + made_newer(&seen),
        "[{backend}] {check}: by a label or its absence"
    );
    // A number is not the string it reads as.
    assert!(
        read(page(10).meta(&["n"], "1")).await.is_empty(),
        "[{backend}] {check}: a meta number matched a string"
    );
    for bad in [
        RootPage::new(0),
        RootPage::new(1001),
        RootPage::new(5).meta(&["a.b"], "x"),
    ] {
        match store.roots_page(&bad).await {
            Err(e) => assert_eq!(
                e.kind(),
                crate::StoreErrorKind::Invalid,
                "[{backend}] {check}"
            ),
            Ok(_) => panic!("[{backend}] {check}: {bad:?} was accepted"),
        }
    }
}

/// `roots_page` matches meta exactly: a string matches its value; nothing there (the key
/// absent, or `null`) matches "or absent" too; a number or an object never matches; a page
/// holds at most its limit.
pub async fn roots_page_matches_meta_exactly(store: &dyn Store) {
    use crate::RootPage;
    let backend = store.backend();
    let check = "roots_page_matches_meta_exactly";
    let other = format!("k{}", SessionId::new().to_string().replace('-', ""));
    let read = |p: RootPage| async move {
        match store.roots_page(&p).await {
            Ok(rows) => rows.iter().map(|r| r.id).collect::<Vec<_>>(),
            Err(e) => panic!("[{backend}] {check}: roots_page failed: {e}"),
        }
    };
    // Exactly: a string matches, nothing there (absent or null) matches "or absent", a
    // number or an object never does.
    let mut kinds = Vec::new();
    for user in [
        serde_json::json!("ann"),
        serde_json::Value::Null,
        serde_json::json!(5),
        serde_json::json!({"a": 1}),
    ] {
        let mut r = root("page-kind");
        r.meta = serde_json::json!({"tag": other, "labels": {"user": user}}).into();
        create(store, check, &r).await;
        kinds.push(r.id);
    }
    let mut bare = root("page-kind");
    bare.meta = serde_json::json!({"tag": other}).into();
    create(store, check, &bare).await;
    let of_other = |p: RootPage| p.meta(&["tag"], other.clone());
    let mut got = read(of_other(
        RootPage::new(10).meta_or_absent(&["labels", "user"], "ann"),
    ))
    .await;
    got.sort();
    let mut want = vec![kinds[0], kinds[1], bare.id];
    want.sort();
    assert_eq!(got, want, "[{backend}] {check}: or absent, exactly");
    assert_eq!(
        read(of_other(RootPage::new(10).meta(&["labels", "user"], "ann"))).await,
        [kinds[0]],
        "[{backend}] {check}: a string, exactly"
    );
    let limited = read(of_other(RootPage::new(2))).await;
    assert_eq!(limited.len(), 2, "[{backend}] {check}: at most the limit");
}
