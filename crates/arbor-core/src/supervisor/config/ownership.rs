//! Who a supervisor acts for: [`Ownership`], checked at build.

use crate::error::{CoreError, CoreResult};

/// Who a supervisor acts for: a tenant and an account or a user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ownership {
    /// The tenant.
    pub tenant_id: String,
    /// The account, if any.
    pub account_id: Option<String>,
    /// The user, if any.
    pub user_id: Option<String>,
}

impl Ownership {
    /// A tenant and a user.
    pub fn user(tenant_id: impl Into<String>, user_id: impl Into<String>) -> Self {
        Self {
            tenant_id: tenant_id.into(),
            account_id: None,
            user_id: Some(user_id.into()),
        }
    }

    pub(crate) fn validate(&self) -> CoreResult<()> {
        let blank = |s: &str| s.trim().is_empty();
        let account_ok = self.account_id.as_deref().is_none_or(|s| !blank(s));
        let user_ok = self.user_id.as_deref().is_none_or(|s| !blank(s));
        let one = self.account_id.is_some() || self.user_id.is_some();
        if blank(&self.tenant_id) || !account_ok || !user_ok || !one {
            return Err(CoreError::validation(
                "tenant_id and non-empty account_id or user_id are required",
            ));
        }
        Ok(())
    }
}
