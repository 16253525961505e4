//! The hub's tests: who leaves it, closes and cancels (each stopped run reported once),
//! rate buckets.

use super::*;

#[test]
fn an_ended_idle_session_leaves_unless_its_inbox_is_held_or_has_mail() {
    let hub = Hub::default();
    let (a, b, c) = (SessionId::new(), SessionId::new(), SessionId::new());
    for id in [a, b, c] {
        hub.register(id, None, Arc::new(Inbox::new()), false);
        assert!(hub.claim_idle(id));
    }
    let held = hub.inbox(b).unwrap();
    hub.inbox(c).unwrap().push(arbor_protocol::InboxMessage {
        id: "m".into(),
        from: None,
        from_name: "host".into(),
        relationship: arbor_protocol::Relationship::Host,
        text: "hi".into(),
        notice: None,
        at: arbor_protocol::Timestamp(1),
    });
    assert!(!hub.end_run(a));
    assert!(!hub.end_run(b));
    assert!(hub.end_run(c));
    assert_eq!(hub.len(), 2, "a left; b is held by a sender, c has mail");
    drop(held);
    assert!(!hub.end_run(b));
    assert_eq!(hub.len(), 1);
}

/// A parent's run and two children's runs whose tokens hang under the parent's (a
/// task-lifetime child), plus a retained idle grandchild.
fn family(hub: &Hub) -> (SessionId, CancellationToken, [SessionId; 3]) {
    let (parent, a, b, idle) = (
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
    );
    let token = CancellationToken::new();
    hub.register(parent, None, Arc::new(Inbox::new()), false);
    assert!(hub.start_run(parent, &token));
    for child in [a, b] {
        hub.register(child, Some(parent), Arc::new(Inbox::new()), false);
        assert!(hub.start_run(child, &token.child_token()));
    }
    hub.register(idle, Some(a), Arc::new(Inbox::new()), false);
    (parent, token, [a, b, idle])
}

/// The two orders of a cancel and a close of the same parent, each forced: every
/// stopped run is reported by exactly one of them.
#[test]
fn a_cancel_and_a_close_of_one_parent_report_each_run_once() {
    // The cancel first: it stopped both runs; the close only closes the idle one.
    let hub = Hub::default();
    let (parent, token, [a, b, idle]) = family(&hub);
    let mut stopped = hub.cancel_under(parent, &token);
    stopped.sort();
    assert_eq!(stopped, both_of(a, b));
    let closed = hub.close(parent);
    assert!(closed.running.is_empty(), "{closed:?}");
    assert_eq!(closed.idle, vec![idle]);

    // The close first: it stopped both; the cancel finds nothing left to stop.
    let hub = Hub::default();
    let (parent, token, [a, b, idle]) = family(&hub);
    let closed = hub.close(parent);
    let mut running = closed.running.clone();
    running.sort();
    assert_eq!(running, both_of(a, b));
    assert_eq!(closed.idle, vec![idle]);
    assert!(hub.cancel_under(parent, &token).is_empty());
}

fn both_of(a: SessionId, b: SessionId) -> Vec<SessionId> {
    let mut v = vec![a, b];
    v.sort();
    v
}

#[test]
fn a_run_started_after_its_close_is_cancelled_at_once() {
    let hub = Hub::default();
    let id = SessionId::new();
    hub.register(id, None, Arc::new(Inbox::new()), false);
    hub.close(id);
    let token = CancellationToken::new();
    assert!(!hub.start_run(id, &token));
    assert!(token.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn refilled_rate_buckets_are_swept() {
    let hub = Hub::default();
    for _ in 0..BUCKET_SWEEP_AT {
        hub.take_token(None, SessionId::new()).unwrap();
    }
    assert_eq!(hub.buckets(), BUCKET_SWEEP_AT);
    tokio::time::advance(BUCKET_REFILL).await;
    hub.take_token(None, SessionId::new()).unwrap();
    assert_eq!(hub.buckets(), 1);
}

fn mail(hub: &Hub, to: SessionId) {
    hub.inbox(to).unwrap().push(arbor_protocol::InboxMessage {
        id: "m".into(),
        from: None,
        from_name: "host".into(),
        relationship: arbor_protocol::Relationship::Host,
        text: "more".into(),
        notice: None,
        at: arbor_protocol::Timestamp(1),
    });
}

/// A run that ends with mail waiting claims its follow-up in the same step: a waiter for
/// quiet woken by any other change, or checking first at that moment, never sees the tree
/// quiet between the run and its follow-up (it did between `end_run` and the `claim_idle`
/// that followed). Without mail, or for the host's session, or once closed, nothing is
/// claimed and the tree is quiet at once.
#[test]
fn a_run_ending_with_mail_claims_its_follow_up_in_the_same_step() {
    let hub = Hub::default();
    let (with_mail, without, host, closed) = (
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
    );
    for (id, host_owned) in [
        (with_mail, false),
        (without, false),
        (host, true),
        (closed, false),
    ] {
        hub.register(id, None, Arc::new(Inbox::new()), host_owned);
        assert!(hub.start_run(id, &CancellationToken::new()));
    }
    mail(&hub, with_mail);
    mail(&hub, host);
    mail(&hub, closed);
    hub.close(closed);

    // The forced interleaving: the check a waiter makes comes right after the run's end,
    // before anything else runs.
    assert!(hub.end_run_claiming(with_mail));
    assert!(hub.any_running(), "the follow-up holds the tree busy");
    assert!(hub.is_running(with_mail));
    assert!(!hub.claim_idle(with_mail), "claimed once, not twice");

    assert!(!hub.end_run_claiming(without));
    assert!(!hub.is_running(without));
    assert!(!hub.end_run_claiming(host), "the host runs its own session");
    assert!(
        !hub.end_run_claiming(closed),
        "nothing of a closed session starts again"
    );

    // The follow-up's own end, without more mail: quiet.
    hub.inbox(with_mail).unwrap().drain();
    assert!(!hub.end_run_claiming(with_mail));
    assert!(!hub.any_running());
}
