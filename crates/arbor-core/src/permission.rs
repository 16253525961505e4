//! Permission policies: the check every tool call passes before it runs.
//!
//! Policies AND-compose: a [`Permission`] holds any number of them and asks each in order;
//! the first that does not allow decides. An empty [`Permission`] allows everything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use arbor_protocol::SessionId;

use crate::identity::Identity;

/// What a policy is asked about.
#[derive(Debug, Clone, Copy)]
pub struct PermissionRequest<'a> {
    /// The agent making the call.
    pub agent: &'a str,
    /// Its session.
    pub session_id: SessionId,
    /// The tool called.
    pub tool: &'a str,
    /// The call's arguments, as the model wrote them.
    pub arguments: &'a serde_json::Value,
    /// The identity the run acts as, if any.
    pub identity: Option<&'a Identity>,
}

/// A policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The call may run.
    Allow,
    /// The call is blocked; the model reads the reason as the tool's result and the run goes
    /// on.
    Deny {
        /// Why, for the model and the host.
        reason: String,
    },
    /// The call is blocked and the run ends with status `denied`.
    Halt {
        /// Why.
        reason: String,
    },
}

/// Decides whether a tool call may run.
pub trait PermissionPolicy: fmt::Debug + Send + Sync {
    /// Decides one call. Must not block.
    fn check(&self, request: &PermissionRequest<'_>) -> Decision;
}

const _: fn(&dyn PermissionPolicy) = |_| {};

/// An AND-composition of policies. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Permission {
    policies: Arc<[Arc<dyn PermissionPolicy>]>,
}

impl Permission {
    /// Allows everything.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// A permission made of one policy.
    pub fn new(policy: impl PermissionPolicy + 'static) -> Self {
        Self {
            policies: Arc::from(vec![Arc::new(policy) as Arc<dyn PermissionPolicy>]),
        }
    }

    /// Both this permission and `other` must allow: this one is asked first.
    pub fn and(&self, other: &Permission) -> Permission {
        let policies: Vec<_> = self
            .policies
            .iter()
            .chain(other.policies.iter())
            .cloned()
            .collect();
        Self {
            policies: Arc::from(policies),
        }
    }

    /// Adds a policy after the existing ones.
    pub fn and_policy(&self, policy: impl PermissionPolicy + 'static) -> Permission {
        self.and(&Permission::new(policy))
    }

    /// How many policies are composed.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// True when no policy is composed (everything is allowed).
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Asks each policy in order; the first that does not allow decides.
    pub fn check(&self, request: &PermissionRequest<'_>) -> Decision {
        for policy in self.policies.iter() {
            match policy.check(request) {
                Decision::Allow => {}
                other => return other,
            }
        }
        Decision::Allow
    }
}

/// Allows only the named tools.
#[derive(Debug, Clone)]
pub struct AllowTools(BTreeSet<String>);

impl AllowTools {
    /// Allows these tool names.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(names.into_iter().map(Into::into).collect())
    }
}

impl PermissionPolicy for AllowTools {
    fn check(&self, request: &PermissionRequest<'_>) -> Decision {
        if self.0.contains(request.tool) {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: format!("tool `{}` is not allowed for this agent", request.tool),
            }
        }
    }
}

/// Denies the named tools.
#[derive(Debug, Clone)]
pub struct DenyTools(BTreeSet<String>);

impl DenyTools {
    /// Denies these tool names.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(names.into_iter().map(Into::into).collect())
    }
}

impl PermissionPolicy for DenyTools {
    fn check(&self, request: &PermissionRequest<'_>) -> Decision {
        if self.0.contains(request.tool) {
            Decision::Deny {
                reason: format!("tool `{}` is denied by policy", request.tool),
            }
        } else {
            Decision::Allow
        }
    }
}

/// Allows at most `max` tool calls over its lifetime, then denies each further one with
/// `Delegation tool-call limit exceeded`. The supervisor composes a fresh one into every
/// delegation, after the host's, the catalog's and the hook's policies.
#[derive(Debug)]
pub struct ToolBudget {
    max: u32,
    used: AtomicU32,
}

impl ToolBudget {
    /// A budget of `max` calls.
    pub fn new(max: u32) -> Self {
        Self {
            max,
            used: AtomicU32::new(0),
        }
    }

    /// Calls asked about so far (denied ones included).
    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }
}

impl PermissionPolicy for ToolBudget {
    fn check(&self, _request: &PermissionRequest<'_>) -> Decision {
        // Saturating, so a run of denials cannot wrap the counter back under the budget.
        let before = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(1))
            })
            .unwrap_or(u32::MAX);
        if before < self.max {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: "Delegation tool-call limit exceeded".to_owned(),
            }
        }
    }
}

/// Lets a tool run only when the run's identity holds a scope: `require("write_file",
/// "write")`. Tools it does not name are allowed; a named tool in a run without an identity
/// is denied.
#[derive(Debug, Clone, Default)]
pub struct RequireScopes(BTreeMap<String, String>);

impl RequireScopes {
    /// No requirements yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `tool` needs `scope`.
    #[must_use]
    pub fn require(mut self, tool: impl Into<String>, scope: impl Into<String>) -> Self {
        self.0.insert(tool.into(), scope.into());
        self
    }
}

impl PermissionPolicy for RequireScopes {
    fn check(&self, request: &PermissionRequest<'_>) -> Decision {
        match self.0.get(request.tool) {
            Some(scope) if !request.identity.is_some_and(|i| i.has_scope(scope)) => {
                Decision::Deny {
                    reason: format!("tool `{}` needs scope `{scope}`", request.tool),
                }
            }
            _ => Decision::Allow,
        }
    }
}

/// A policy from a closure.
pub struct PolicyFn<F>(F);

impl<F> fmt::Debug for PolicyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PolicyFn")
    }
}

impl<F> PermissionPolicy for PolicyFn<F>
where
    F: Fn(&PermissionRequest<'_>) -> Decision + Send + Sync,
{
    fn check(&self, request: &PermissionRequest<'_>) -> Decision {
        (self.0)(request)
    }
}

/// Makes a policy of a closure.
pub fn policy_fn<F>(f: F) -> PolicyFn<F>
where
    F: Fn(&PermissionRequest<'_>) -> Decision + Send + Sync,
{
    PolicyFn(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(tool: &'a str, args: &'a serde_json::Value) -> PermissionRequest<'a> {
        PermissionRequest {
            agent: "a",
            session_id: SessionId::new(),
            tool,
            arguments: args,
            identity: None,
        }
    }

    #[test]
    fn and_composition_first_denial_wins() {
        let args = serde_json::json!({});
        let p = Permission::new(AllowTools::new(["read", "write"]))
            .and_policy(DenyTools::new(["write"]))
            .and_policy(policy_fn(|_| Decision::Deny {
                reason: "third".into(),
            }));
        assert_eq!(p.len(), 3);
        assert_eq!(
            p.check(&req("exec", &args)),
            Decision::Deny {
                reason: "tool `exec` is not allowed for this agent".into()
            }
        );
        assert_eq!(
            p.check(&req("write", &args)),
            Decision::Deny {
                reason: "tool `write` is denied by policy".into()
            }
        );
        assert_eq!(
            p.check(&req("read", &args)),
            Decision::Deny {
                reason: "third".into()
            }
        );
        assert_eq!(
            Permission::allow_all().check(&req("x", &args)),
            Decision::Allow
        );
    }

    #[test]
    fn and_never_widens() {
        let narrow = Permission::new(DenyTools::new(["rm"]));
        let wide = Permission::allow_all();
        let args = serde_json::json!({});
        assert!(matches!(
            wide.and(&narrow).check(&req("rm", &args)),
            Decision::Deny { .. }
        ));
        assert!(matches!(
            narrow.and(&wide).check(&req("rm", &args)),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn tool_budget_denies_past_its_maximum_and_stays_denied() {
        let args = serde_json::json!({});
        let budget = ToolBudget::new(2);
        assert_eq!(budget.check(&req("a", &args)), Decision::Allow);
        assert_eq!(budget.check(&req("b", &args)), Decision::Allow);
        for _ in 0..3 {
            assert_eq!(
                budget.check(&req("c", &args)),
                Decision::Deny {
                    reason: "Delegation tool-call limit exceeded".into()
                }
            );
        }
        assert_eq!(budget.used(), 5);
    }

    #[test]
    fn tool_budget_never_overshoots_under_parallel_checks() {
        let budget = Arc::new(ToolBudget::new(100));
        let allowed = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let args = serde_json::json!({});
                    for _ in 0..50 {
                        if budget.check(&req("t", &args)) == Decision::Allow {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(allowed.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn require_scopes_reads_the_identity() {
        let args = serde_json::json!({});
        let policy = RequireScopes::new().require("write", "fs:write");
        let reader = crate::Identity::builder("a", "t")
            .scopes(["fs:read"])
            .build();
        let writer = crate::Identity::builder("a", "t")
            .scopes(["fs:write"])
            .build();
        let mut r = req("write", &args);
        assert!(matches!(policy.check(&r), Decision::Deny { .. }));
        r.identity = Some(&reader);
        assert_eq!(
            policy.check(&r),
            Decision::Deny {
                reason: "tool `write` needs scope `fs:write`".into()
            }
        );
        r.identity = Some(&writer);
        assert_eq!(policy.check(&r), Decision::Allow);
        assert_eq!(policy.check(&req("read", &args)), Decision::Allow);
    }
}
