//! Group commit: writes that wait at the same moment share one commit, a refused write in a
//! batch is rolled back alone, each caller hears its own result, and what was reported
//! stored is in the file when another connection opens it.

use std::sync::Arc;

use arbor_protocol::{EntryKind, Message, RunId, Usage};
use arbor_store::{SessionRecord, SessionUpdate, Store, StoreErrorKind};
use arbor_store_sqlite::SqliteStore;

fn note(text: &str) -> EntryKind {
    EntryKind::Message {
        message: Message::user(text),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn writes_waiting_together_share_one_commit_and_each_hears_its_own_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let before = store.write_stats();
    assert_eq!((before.writes, before.commits), (1, 1));

    // 32 children created at once, two of them under one name: one of those is refused.
    let mut tasks = Vec::new();
    for i in 0..32 {
        let name = if i == 31 {
            "kid-0".to_owned()
        } else {
            format!("kid-{i}")
        };
        let child = SessionRecord::new_child(&root, name, "worker", "model-a");
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.create_session(&child).await.map(|()| child.id)
        }));
    }
    let mut created = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(id) => created.push(id),
            Err(e) => refused.push(e),
        }
    }
    assert_eq!(created.len(), 31);
    assert_eq!(refused.len(), 1);
    assert_eq!(
        refused[0].kind(),
        StoreErrorKind::AlreadyExists,
        "{}",
        refused[0]
    );
    assert!(refused[0].to_string().contains("kid-0"), "{}", refused[0]);
    let after = store.write_stats();
    assert_eq!(after.writes - before.writes, 32);
    // They were all ready before the first commit ran: one commit carried them.
    assert_eq!(after.commits - before.commits, 1, "{after:?}");

    // Each child's transcript and usage written at once: every write lands, in one commit.
    let mut tasks = Vec::new();
    for (i, id) in created.iter().copied().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let usage = Usage::new(10, u64::try_from(i).unwrap());
            let update = SessionUpdate {
                own_usage: Some(usage),
                ..SessionUpdate::default()
            };
            store
                .append(id, RunId::new(), &[note(&format!("hi {i}"))], Some(&update))
                .await
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), 1);
    }
    assert_eq!(store.write_stats().commits - after.commits, 1);

    // A sequence of writes, each awaited before the next: one commit each.
    let before = store.write_stats();
    for i in 0..3 {
        store
            .append(
                created[0],
                RunId::new(),
                &[note(&format!("again {i}"))],
                None,
            )
            .await
            .unwrap();
    }
    let after = store.write_stats();
    assert_eq!(
        (after.writes - before.writes, after.commits - before.commits),
        (3, 3)
    );

    // Another connection finds everything that was reported stored.
    drop(store);
    let other = SqliteStore::open_read_only(&path).unwrap();
    let kids = other
        .list_sessions(arbor_store::SessionQuery::Children(root.id))
        .await
        .unwrap();
    assert_eq!(kids.len(), 31);
    for (i, id) in created.iter().enumerate() {
        let record = other.session(*id).await.unwrap().unwrap();
        assert_eq!(record.own_usage.output_tokens, u64::try_from(i).unwrap());
        let entries = other.transcript(*id, 0, None).await.unwrap();
        assert_eq!(entries.len(), if i == 0 { 4 } else { 1 });
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_refused_write_inside_a_batch_changes_nothing_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("arbor.db")).unwrap());
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    // In one batch: an append with a stale expected version (refused, its entry not kept)
    // between two appends that land.
    let stale = SessionUpdate {
        expected_version: Some(99),
        replies: Some(7),
        ..SessionUpdate::default()
    };
    let (first, refused, third) = ([note("first")], [note("refused")], [note("third")]);
    let (a, b, c) = tokio::join!(
        store.append(root.id, RunId::new(), &first, None),
        store.append(root.id, RunId::new(), &refused, Some(&stale)),
        store.append(root.id, RunId::new(), &third, None),
    );
    assert_eq!(a.unwrap(), 1);
    assert_eq!(b.unwrap_err().kind(), StoreErrorKind::Conflict);
    assert_eq!(c.unwrap(), 2);
    let entries = store.transcript(root.id, 0, None).await.unwrap();
    let texts: Vec<String> = entries
        .iter()
        .map(|e| match &e.kind {
            EntryKind::Message { message } => message.text().to_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["first", "third"]);
    let record = store.session(root.id).await.unwrap().unwrap();
    assert_eq!(record.replies, 0);
    assert_eq!(store.write_stats().commits, 2, "{:?}", store.write_stats());
}

/// On a worker per core, writers racing the flush: every write lands exactly once, numbered
/// without a gap, and no caller waits for a flush that never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_two_threads_each_land_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("arbor.db")).unwrap());
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                let entries = [note(&format!("{w}-{i}"))];
                store
                    .append(root.id, RunId::new(), &entries, None)
                    .await
                    .unwrap();
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), all)
        .await
        .expect("a writer was stranded");
    let entries = store.transcript(root.id, 0, None).await.unwrap();
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=400).collect::<Vec<_>>());
    let mut texts: Vec<String> = entries
        .iter()
        .map(|e| match &e.kind {
            EntryKind::Message { message } => message.text().to_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), 400);
    let stats = store.write_stats();
    assert_eq!(stats.writes, 401);
    assert!(stats.commits <= stats.writes, "{stats:?}");
}

/// A read never waits for a batch being committed: while the writer's connection waits for
/// the file (another process holds its write lock), the session, its transcript and the
/// listings are read on the reader connection at once, and see what was committed; the
/// waiting write lands once the file is free, and is read back then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_on_while_a_batch_waits_for_the_file() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let options = arbor_store_sqlite::SqliteOptions::new().busy_timeout(Duration::from_secs(20));
    let store = Arc::new(options.open(&path).unwrap());
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    store
        .append(root.id, RunId::new(), &[note("committed")], None)
        .await
        .unwrap();

    // Another process takes the file's write lock and keeps it.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let writer = store.clone();
    let waiting = tokio::spawn(async move {
        writer
            .append(root.id, RunId::new(), &[note("waited")], None)
            .await
    });
    // The batch has found the file busy and waits for it on the pool, holding the writer's
    // connection.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the write did not wait for the file"
    );

    let reads = async {
        let record = store.session(root.id).await.unwrap().unwrap();
        let entries = store.transcript(root.id, 0, None).await.unwrap();
        let roots = store
            .list_sessions(arbor_store::SessionQuery::Roots)
            .await
            .unwrap();
        (record, entries, roots)
    };
    let (record, entries, roots) = tokio::time::timeout(Duration::from_secs(5), reads)
        .await
        .expect("a read waited for the batch being committed");
    assert_eq!(record.id, root.id);
    assert_eq!(entries.len(), 1, "only what was committed is seen");
    assert_eq!(roots.len(), 1);
    assert!(!waiting.is_finished(), "the file is still held");

    other.execute_batch("ROLLBACK").unwrap();
    let seq = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiting write never landed")
        .unwrap()
        .unwrap();
    assert_eq!(seq, 2);
    let entries = store.transcript(root.id, 0, None).await.unwrap();
    assert_eq!(entries.len(), 2, "the write reported stored is read back");
}
