//! Identity propagation and narrowing through delegation, and the permission order of a
//! child run.

use std::sync::{Arc, Mutex};

use arbor_core::permission::{RequireScopes, policy_fn};
use arbor_core::supervisor::{
    BeforeContext, BeforeDecision, BeforeHook, ChildEntry, DelegationRequest, Ownership,
    Supervisor, factory_fn,
};
use arbor_core::{Agent, CoreErrorKind, Decision, Identity, IdentityErrorCode, Permission};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{Message, Timestamp};
use async_trait::async_trait;
use serde_json::json;

fn owner() -> Ownership {
    Ownership::user("acme", "alice")
}

fn alice(scopes: &[&str]) -> Identity {
    Identity::builder("alice", "acme")
        .user("alice")
        .scopes(scopes.iter().copied())
        .build()
}

fn echo_then_done() -> Agent {
    Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call("echo", json!({"text": "write it"})),
            ScriptedTurn::text("done"),
        ])))
        .tool(arbor_core::builtin::Echo)
        .build()
        .unwrap()
}

async fn tool_result(store: &dyn arbor_store::Store, session: arbor_protocol::SessionId) -> String {
    store
        .transcript(session, 0, None)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.kind {
            arbor_protocol::EntryKind::Message {
                message: Message::Tool(r),
            } => Some(r.content),
            _ => None,
        })
        .unwrap()
}

#[test]
fn construction_refuses_an_inactive_or_foreign_identity() {
    let build = |identity: Identity| {
        Supervisor::builder(owner())
            .identity(identity)
            .child(ChildEntry::agent("c", echo_then_done()))
            .build()
            .unwrap_err()
    };
    let cases = [
        (
            Identity::builder("alice", "other").user("alice").build(),
            IdentityErrorCode::OwnershipTenant,
            "Identity tenant does not match the owner",
        ),
        (
            Identity::builder("alice", "acme").user("bob").build(),
            IdentityErrorCode::OwnershipUser,
            "Identity user does not match the owner",
        ),
        (
            Identity::builder("alice", "acme")
                .user("alice")
                .expires_at(Timestamp(1))
                .build(),
            IdentityErrorCode::Expired,
            "Identity has expired",
        ),
        (
            Identity::builder("alice", "acme")
                .user("alice")
                .revoked(true)
                .build(),
            IdentityErrorCode::Revoked,
            "Identity has been revoked",
        ),
    ];
    for (identity, code, message) in cases {
        let e = build(identity);
        assert_eq!(e.kind(), CoreErrorKind::Denied);
        assert_eq!(e.identity_code(), Some(code));
        assert_eq!(e.to_string(), message);
    }
}

#[tokio::test]
async fn a_child_gets_its_narrowed_identity_and_a_scoped_tool_is_blocked() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in = seen.clone();
    let sup = Supervisor::builder(owner())
        .identity(alice(&["fs:read", "fs:write"]))
        .child(
            ChildEntry::new(
                "reader",
                factory_fn(move |ctx| {
                    let seen = seen_in.clone();
                    async move {
                        let id = ctx.identity.clone().unwrap();
                        seen.lock().unwrap().push((
                            id.scopes().iter().cloned().collect::<Vec<_>>(),
                            id.delegated_from().map(str::to_owned),
                        ));
                        // The echo tool needs fs:write, which this child was not given.
                        echo_then_done()
                            .to_builder()
                            .policy(RequireScopes::new().require("echo", "fs:write"))
                            .build()
                    }
                }),
            )
            .scopes(["fs:read"]),
        )
        .child(
            ChildEntry::new(
                "writer",
                factory_fn(|_ctx| async move {
                    echo_then_done()
                        .to_builder()
                        .policy(RequireScopes::new().require("echo", "fs:write"))
                        .build()
                }),
            )
            .scopes(["fs:write"]),
        )
        .build()
        .unwrap();

    let store = sup.store().clone();
    let r = sup
        .delegate(DelegationRequest::new("reader", "read"))
        .await
        .unwrap();
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![(vec!["fs:read".to_owned()], Some("alice".to_owned()))]
    );
    assert_eq!(
        tool_result(store.as_ref(), r.session_id).await,
        "permission denied: tool `echo` needs scope `fs:write`"
    );

    let w = sup
        .delegate(DelegationRequest::new("writer", "write"))
        .await
        .unwrap();
    assert_eq!(tool_result(store.as_ref(), w.session_id).await, "write it");
}

#[tokio::test]
async fn a_wider_scope_is_refused_before_the_factory_runs_and_nothing_is_counted() {
    let built = Arc::new(Mutex::new(0));
    let built_in = built.clone();
    let sup = Supervisor::builder(owner())
        .identity(alice(&["fs:read"]))
        .child(
            ChildEntry::new(
                "admin",
                factory_fn(move |_ctx| {
                    let built = built_in.clone();
                    async move {
                        *built.lock().unwrap() += 1;
                        Ok(echo_then_done())
                    }
                }),
            )
            .scopes(["fs:read", "fs:admin"]),
        )
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let e = sup
        .delegate(DelegationRequest::new("admin", "escalate"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Denied);
    assert_eq!(e.identity_code(), Some(IdentityErrorCode::ScopeWiden));
    assert_eq!(e.to_string(), "Delegation widens scope: fs:admin");
    assert_eq!(*built.lock().unwrap(), 0);
    assert!(sub.try_recv().is_none());
    assert_eq!(sup.active_children(), 0);
    assert_eq!(sup.summary()[0].attempts, 0);
}

#[tokio::test]
async fn nested_children_narrow_from_their_parent_not_the_root() {
    let sup = Supervisor::builder(owner())
        .identity(alice(&["a", "b", "c"]))
        .child(
            ChildEntry::new(
                "middle",
                factory_fn(|ctx| async move {
                    let narrow = ctx
                        .delegator
                        .delegate(DelegationRequest::new("leaf_ab", "x"))
                        .await;
                    let wide = ctx
                        .delegator
                        .delegate(DelegationRequest::new("leaf_c", "x"))
                        .await;
                    let text = format!(
                        "{} | {}",
                        narrow.map_or_else(|e| e.to_string(), |r| r.result.text),
                        wide.map_or_else(|e| e.to_string(), |r| r.result.text)
                    );
                    Agent::builder("middle")
                        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                            text,
                        )])))
                        .build()
                }),
            )
            .scopes(["a", "b"]),
        )
        .child(
            ChildEntry::new(
                "leaf_ab",
                factory_fn(|ctx| async move {
                    let scopes: Vec<String> =
                        ctx.identity.unwrap().scopes().iter().cloned().collect();
                    Agent::builder("leaf")
                        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                            scopes.join(","),
                        )])))
                        .build()
                }),
            )
            .scopes(["b"]),
        )
        .child(ChildEntry::agent("leaf_c", echo_then_done()).scopes(["c"]))
        .build()
        .unwrap();
    let r = sup
        .delegate(DelegationRequest::new("middle", "go"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "b | Delegation widens scope: c");
}

#[tokio::test]
async fn without_scopes_the_parent_identity_passes_unchanged_and_without_one_none_appears() {
    let parent = alice(&["x"]);
    let sup = Supervisor::builder(owner())
        .identity(parent.clone())
        .child(ChildEntry::new(
            "c",
            factory_fn(|ctx| async move {
                let same = ctx.identity.as_deref().map(Identity::principal) == Some("alice")
                    && ctx.identity.as_deref().unwrap().delegated_from().is_none();
                Agent::builder("c")
                    .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                        same.to_string(),
                    )])))
                    .build()
            }),
        ))
        .build()
        .unwrap();
    let r = sup
        .delegate(DelegationRequest::new("c", "x"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "true");

    let anonymous = Supervisor::builder(owner())
        .child(
            ChildEntry::new(
                "c",
                factory_fn(|ctx| async move {
                    Agent::builder("c")
                        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                            ctx.identity.is_none().to_string(),
                        )])))
                        .build()
                }),
            )
            .scopes(["x"]),
        )
        .build()
        .unwrap();
    let r = anonymous
        .delegate(DelegationRequest::new("c", "x"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "true");
}

#[derive(Debug)]
struct AddPolicy(Arc<Mutex<Vec<&'static str>>>);

#[async_trait]
impl BeforeHook for AddPolicy {
    async fn before(&self, _ctx: &BeforeContext) -> BeforeDecision {
        let log = self.0.clone();
        BeforeDecision::Modify {
            input: None,
            limits: None,
            permission: Some(Permission::new(policy_fn(move |_| {
                log.lock().unwrap().push("hook");
                Decision::Allow
            }))),
        }
    }
}

#[tokio::test]
async fn child_permissions_compose_supervisor_catalog_hook_then_the_agent() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let recorder = |name: &'static str| {
        let log = log.clone();
        Permission::new(policy_fn(move |_| {
            log.lock().unwrap().push(name);
            Decision::Allow
        }))
    };
    let agent_log = log.clone();
    let child = echo_then_done()
        .to_builder()
        .policy(policy_fn(move |_| {
            agent_log.lock().unwrap().push("agent");
            Decision::Deny {
                reason: "agent says no".into(),
            }
        }))
        .build()
        .unwrap();
    let sup = Supervisor::builder(owner())
        .permission(recorder("supervisor"))
        .child(ChildEntry::agent("c", child).permission(recorder("catalog")))
        .before(AddPolicy(log.clone()))
        .build()
        .unwrap();
    let r = sup
        .delegate(DelegationRequest::new("c", "x"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "done");
    assert_eq!(
        log.lock().unwrap().clone(),
        ["supervisor", "catalog", "hook", "agent"]
    );
}
