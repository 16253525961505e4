//! Identities: who a run acts as (a principal of a tenant, account or user, with scopes and
//! an expiry), and the two checks a delegation passes so a child never holds more than its
//! parent: [`Identity::narrow`] (a subset of scopes, no later expiry) and
//! [`Identity::assert_propagation`] (same tenant, account and user, no new scopes).
//!
//! The runtime never holds credentials: an identity is what the host verified, not a secret.

use std::collections::BTreeSet;
use std::fmt;

use arbor_protocol::Timestamp;
use thiserror::Error;

/// How far in the future an identity's issue time may lie (clock skew), in milliseconds.
pub const ISSUED_AT_SKEW_MS: u64 = 60_000;

/// Why an identity was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdentityErrorCode {
    /// The host has not verified it.
    Unverified,
    /// It was revoked.
    Revoked,
    /// It has expired.
    Expired,
    /// It was issued more than [`ISSUED_AT_SKEW_MS`] in the future.
    NotYetValid,
    /// Its tenant is not the owner's.
    OwnershipTenant,
    /// Its account is not the owner's.
    OwnershipAccount,
    /// Its user is not the owner's.
    OwnershipUser,
    /// A narrowing asked for no scopes.
    EmptyScopes,
    /// A scope the parent does not hold.
    ScopeWiden,
    /// An expiry later than the parent's.
    ExpiryWiden,
    /// A different tenant than the parent's.
    TenantWiden,
    /// A different account than the parent's.
    AccountWiden,
    /// A different user than the parent's.
    UserWiden,
}

impl IdentityErrorCode {
    /// The code's wire name (`scope_widen`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unverified => "unverified",
            Self::Revoked => "revoked",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::OwnershipTenant => "ownership_tenant",
            Self::OwnershipAccount => "ownership_account",
            Self::OwnershipUser => "ownership_user",
            Self::EmptyScopes => "empty_scopes",
            Self::ScopeWiden => "scope_widen",
            Self::ExpiryWiden => "expiry_widen",
            Self::TenantWiden => "tenant_widen",
            Self::AccountWiden => "account_widen",
            Self::UserWiden => "user_widen",
        }
    }
}

impl fmt::Display for IdentityErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An identity refused, with its code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct IdentityError {
    /// Why.
    pub code: IdentityErrorCode,
    /// What to tell the caller.
    pub message: String,
}

impl IdentityError {
    fn new(code: IdentityErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Who a run acts as. Immutable; build one with [`Identity::builder`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    principal: String,
    tenant_id: String,
    account_id: Option<String>,
    user_id: Option<String>,
    scopes: BTreeSet<String>,
    issued_at: Timestamp,
    expires_at: Option<Timestamp>,
    verified: bool,
    revoked: bool,
    delegated_from: Option<String>,
}

impl Identity {
    /// Starts an identity for `principal` in `tenant_id`, verified, issued now, without
    /// expiry or scopes.
    pub fn builder(principal: impl Into<String>, tenant_id: impl Into<String>) -> IdentityBuilder {
        IdentityBuilder {
            inner: Identity {
                principal: principal.into(),
                tenant_id: tenant_id.into(),
                account_id: None,
                user_id: None,
                scopes: BTreeSet::new(),
                issued_at: Timestamp::now(),
                expires_at: None,
                verified: true,
                revoked: false,
                delegated_from: None,
            },
        }
    }

    /// The principal (who).
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The tenant.
    pub fn tenant_id(&self) -> &str {
        &self.tenant_id
    }

    /// The account, if any.
    pub fn account_id(&self) -> Option<&str> {
        self.account_id.as_deref()
    }

    /// The user, if any.
    pub fn user_id(&self) -> Option<&str> {
        self.user_id.as_deref()
    }

    /// The scopes it holds.
    pub fn scopes(&self) -> &BTreeSet<String> {
        &self.scopes
    }

    /// Whether it holds `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.contains(scope)
    }

    /// When it was issued.
    pub fn issued_at(&self) -> Timestamp {
        self.issued_at
    }

    /// When it expires, if it does.
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.expires_at
    }

    /// The principal it was narrowed from, for a delegated identity.
    pub fn delegated_from(&self) -> Option<&str> {
        self.delegated_from.as_deref()
    }

    /// Checks it is usable at `now`: verified, not revoked, not expired, not issued more than
    /// a minute ahead.
    pub fn check_active(&self, now: Timestamp) -> Result<(), IdentityError> {
        use IdentityErrorCode as C;
        if !self.verified {
            return Err(IdentityError::new(
                C::Unverified,
                "Identity is not verified",
            ));
        }
        if self.revoked {
            return Err(IdentityError::new(C::Revoked, "Identity has been revoked"));
        }
        if self.expires_at.is_some_and(|e| e <= now) {
            return Err(IdentityError::new(C::Expired, "Identity has expired"));
        }
        if self.issued_at.0 > now.0.saturating_add(ISSUED_AT_SKEW_MS) {
            return Err(IdentityError::new(
                C::NotYetValid,
                "Identity is issued in the future",
            ));
        }
        Ok(())
    }

    /// Checks it belongs to the owner: the same tenant, and the same account and user where
    /// the owner names them.
    pub fn check_ownership(
        &self,
        tenant_id: &str,
        account_id: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<(), IdentityError> {
        use IdentityErrorCode as C;
        if self.tenant_id != tenant_id {
            return Err(IdentityError::new(
                C::OwnershipTenant,
                "Identity tenant does not match the owner",
            ));
        }
        if account_id.is_some() && self.account_id.as_deref() != account_id {
            return Err(IdentityError::new(
                C::OwnershipAccount,
                "Identity account does not match the owner",
            ));
        }
        if user_id.is_some() && self.user_id.as_deref() != user_id {
            return Err(IdentityError::new(
                C::OwnershipUser,
                "Identity user does not match the owner",
            ));
        }
        Ok(())
    }

    /// A child identity holding only `scopes` (a non-empty subset of this one's), expiring no
    /// later than `expires_at` or this one, whichever is first. Tenant, account and user are
    /// copied; the child records this principal as the one it was delegated from.
    pub fn narrow<I, S>(
        &self,
        scopes: I,
        expires_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<Identity, IdentityError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        use IdentityErrorCode as C;
        self.check_active(now)?;
        let scopes: BTreeSet<String> = scopes.into_iter().map(Into::into).collect();
        if scopes.is_empty() {
            return Err(IdentityError::new(
                C::EmptyScopes,
                "Delegated scopes must not be empty",
            ));
        }
        if let Some(wider) = scopes.iter().find(|s| !self.scopes.contains(*s)) {
            return Err(IdentityError::new(
                C::ScopeWiden,
                format!("Delegation widens scope: {wider}"),
            ));
        }
        let expires_at = match (self.expires_at, expires_at) {
            (Some(parent), Some(child)) if child > parent => {
                return Err(IdentityError::new(
                    C::ExpiryWiden,
                    "Delegation extends the identity's expiry",
                ));
            }
            (Some(parent), None) => Some(parent),
            (_, child) => child,
        };
        Ok(Identity {
            principal: self.principal.clone(),
            tenant_id: self.tenant_id.clone(),
            account_id: self.account_id.clone(),
            user_id: self.user_id.clone(),
            scopes,
            issued_at: now,
            expires_at,
            verified: true,
            revoked: false,
            delegated_from: Some(self.principal.clone()),
        })
    }

    /// Checks `child` holds no more than this identity: both active, the same tenant, the
    /// same account and user where this one has them, no scope this one lacks, no later
    /// expiry.
    pub fn assert_propagation(
        &self,
        child: &Identity,
        now: Timestamp,
    ) -> Result<(), IdentityError> {
        use IdentityErrorCode as C;
        self.check_active(now)?;
        child.check_active(now)?;
        if child.tenant_id != self.tenant_id {
            return Err(IdentityError::new(
                C::TenantWiden,
                "Delegation changes the tenant",
            ));
        }
        if self.account_id.is_some() && child.account_id != self.account_id {
            return Err(IdentityError::new(
                C::AccountWiden,
                "Delegation changes the account",
            ));
        }
        if self.user_id.is_some() && child.user_id != self.user_id {
            return Err(IdentityError::new(
                C::UserWiden,
                "Delegation changes the user",
            ));
        }
        if let Some(wider) = child.scopes.iter().find(|s| !self.scopes.contains(*s)) {
            return Err(IdentityError::new(
                C::ScopeWiden,
                format!("Delegation widens scope: {wider}"),
            ));
        }
        if let Some(parent) = self.expires_at
            && child.expires_at.is_none_or(|c| c > parent)
        {
            return Err(IdentityError::new(
                C::ExpiryWiden,
                "Delegation extends the identity's expiry",
            ));
        }
        Ok(())
    }
}

/// Builds an [`Identity`].
#[derive(Debug, Clone)]
#[must_use]
pub struct IdentityBuilder {
    inner: Identity,
}

impl IdentityBuilder {
    /// The account.
    pub fn account(mut self, account_id: impl Into<String>) -> Self {
        self.inner.account_id = Some(account_id.into());
        self
    }

    /// The user.
    pub fn user(mut self, user_id: impl Into<String>) -> Self {
        self.inner.user_id = Some(user_id.into());
        self
    }

    /// The scopes held.
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.inner.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// When it was issued (default: now).
    pub fn issued_at(mut self, at: Timestamp) -> Self {
        self.inner.issued_at = at;
        self
    }

    /// When it expires (default: never).
    pub fn expires_at(mut self, at: Timestamp) -> Self {
        self.inner.expires_at = Some(at);
        self
    }

    /// Whether the host verified it (default: yes).
    pub fn verified(mut self, verified: bool) -> Self {
        self.inner.verified = verified;
        self
    }

    /// Whether it was revoked (default: no).
    pub fn revoked(mut self, revoked: bool) -> Self {
        self.inner.revoked = revoked;
        self
    }

    /// The identity.
    pub fn build(self) -> Identity {
        self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(now: Timestamp) -> Identity {
        Identity::builder("alice", "acme")
            .user("u1")
            .scopes(["read", "write"])
            .issued_at(now)
            .expires_at(Timestamp(now.0 + 10_000))
            .build()
    }

    #[test]
    fn narrow_keeps_a_subset_and_the_expiry() {
        let now = Timestamp(1_000_000);
        let p = parent(now);
        let c = p.narrow(["read"], None, now).unwrap();
        assert_eq!(c.scopes().iter().collect::<Vec<_>>(), ["read"]);
        assert_eq!(c.expires_at(), p.expires_at());
        assert_eq!(c.delegated_from(), Some("alice"));
        p.assert_propagation(&c, now).unwrap();
    }

    #[test]
    fn narrow_refuses_wider_scopes_expiry_and_empty_sets() {
        let now = Timestamp(1_000_000);
        let p = parent(now);
        let e = p.narrow(["read", "admin"], None, now).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                IdentityErrorCode::ScopeWiden,
                "Delegation widens scope: admin"
            )
        );
        let e = p.narrow(Vec::<String>::new(), None, now).unwrap_err();
        assert_eq!(e.code, IdentityErrorCode::EmptyScopes);
        let e = p
            .narrow(["read"], Some(Timestamp(now.0 + 20_000)), now)
            .unwrap_err();
        assert_eq!(e.code, IdentityErrorCode::ExpiryWiden);
    }

    #[test]
    fn activity_checks_each_state() {
        let now = Timestamp(1_000_000);
        let codes = [
            (
                Identity::builder("a", "t").verified(false).build(),
                IdentityErrorCode::Unverified,
            ),
            (
                Identity::builder("a", "t").revoked(true).build(),
                IdentityErrorCode::Revoked,
            ),
            (
                Identity::builder("a", "t").expires_at(now).build(),
                IdentityErrorCode::Expired,
            ),
            (
                Identity::builder("a", "t")
                    .issued_at(Timestamp(now.0 + ISSUED_AT_SKEW_MS + 1))
                    .build(),
                IdentityErrorCode::NotYetValid,
            ),
        ];
        for (identity, code) in codes {
            assert_eq!(identity.check_active(now).unwrap_err().code, code);
        }
        let skewed = Identity::builder("a", "t")
            .issued_at(Timestamp(now.0 + ISSUED_AT_SKEW_MS))
            .build();
        skewed.check_active(now).unwrap();
    }

    #[test]
    fn propagation_refuses_another_tenant_account_or_user() {
        let now = Timestamp(1_000_000);
        let p = parent(now);
        let other_tenant = Identity::builder("b", "other")
            .user("u1")
            .issued_at(now)
            .build();
        assert_eq!(
            p.assert_propagation(&other_tenant, now).unwrap_err().code,
            IdentityErrorCode::TenantWiden
        );
        let other_user = Identity::builder("b", "acme")
            .user("u2")
            .issued_at(now)
            .build();
        assert_eq!(
            p.assert_propagation(&other_user, now).unwrap_err().code,
            IdentityErrorCode::UserWiden
        );
        let no_expiry = Identity::builder("b", "acme")
            .user("u1")
            .scopes(["read"])
            .issued_at(now)
            .build();
        assert_eq!(
            p.assert_propagation(&no_expiry, now).unwrap_err().code,
            IdentityErrorCode::ExpiryWiden
        );
    }

    #[test]
    fn ownership_must_match() {
        let id = Identity::builder("a", "acme").account("acc").build();
        id.check_ownership("acme", Some("acc"), None).unwrap();
        assert_eq!(
            id.check_ownership("other", None, None).unwrap_err().code,
            IdentityErrorCode::OwnershipTenant
        );
        assert_eq!(
            id.check_ownership("acme", Some("x"), None)
                .unwrap_err()
                .code,
            IdentityErrorCode::OwnershipAccount
        );
        assert_eq!(
            id.check_ownership("acme", None, Some("u"))
                .unwrap_err()
                .code,
            IdentityErrorCode::OwnershipUser
        );
    }
}
