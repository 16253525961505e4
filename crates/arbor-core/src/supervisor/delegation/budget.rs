//! A delegation's place in the tree's budget pools ([`crate::budget`]): whether the child
//! spends from one, and the pool it asked for, reserved from its parent's pools at
//! registration, before its record is written.

use arbor_store::SessionRecord;

use crate::budget::{self, Grant};
use crate::error::{CoreError, CoreResult};
use crate::supervisor::delegation::admitted::Admitted;
use crate::supervisor::request::Mode;
use crate::supervisor::runtime::Supervisor;

/// What registration settled about a child's budget.
#[derive(Debug, Default)]
pub(crate) struct ChildPool {
    /// It spends from a pool: its own, or one on its parent's path.
    pub(crate) budgeted: bool,
    /// Its own pool, as granted.
    pub(crate) grant: Option<Grant>,
}

impl Supervisor {
    /// Reserves the pool the delegation asked for (clamped or refused as a tool error, per
    /// the supervisor's policy), and tells whether the child spends from a pool at all: it
    /// does when its `parent` (the record admission read) does. A spawn that asks for no
    /// pool under a parent outside every pool reads nothing more.
    pub(crate) async fn child_budget(
        &self,
        a: &Admitted,
        record: &SessionRecord,
        parent: Option<&SessionRecord>,
    ) -> CoreResult<ChildPool> {
        let Some(parent) = parent else {
            return Ok(ChildPool::default());
        };
        // Read alone: a parent child's typed meta is not turned into JSON for it.
        let under_pool = parent
            .meta
            .field(budget::BUDGETED)
            .is_some_and(|v| v.as_bool() == Some(true));
        let Some(asked) = a.terms.budget else {
            return Ok(ChildPool {
                budgeted: under_pool,
                grant: None,
            });
        };
        let store = self.live().store();
        let above: Vec<_> = crate::session::ancestors(store.as_ref(), record)
            .await?
            .into_iter()
            .map(|t| t.session)
            .collect();
        // A task child's unspent part returns when it ends; a kept child (session lifetime,
        // message mode) may run again, so its pool holds while its record lives.
        let returns = a.terms.mode != Mode::Message
            && a.terms.policy.lifetime == crate::supervisor::config::policy::Lifetime::Task;
        let granted = budget::open_pool(
            store.as_ref(),
            record.root_id,
            record.id,
            (&above, asked, self.settings().budget_policy(), returns),
        )
        .await?;
        match granted {
            Ok(grant) => Ok(ChildPool {
                budgeted: true,
                grant: Some(grant),
            }),
            Err(refusal) => Err(CoreError::limit_error(refusal.message(), None)),
        }
    }
}
