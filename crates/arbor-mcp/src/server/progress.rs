//! Progress notifications: while a sync spawn or a wait runs, each event of the child's
//! delegation reaches a client that sent a progress token, as one notification.

use arbor_core::Subscription;
use arbor_protocol::SupervisorEnvelope;
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};

/// Where a call's progress goes (nowhere when the client sent no token).
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    to: Option<(ProgressToken, Peer<RoleServer>)>,
}

impl Progress {
    /// The request's progress token and its peer.
    pub(crate) fn of(cx: &RequestContext<RoleServer>) -> Self {
        Self {
            to: cx.meta.get_progress_token().map(|t| (t, cx.peer.clone())),
        }
    }

    /// Forwards the events of `delegation` from `events` until the future is dropped.
    pub(crate) async fn forward(
        &self,
        mut events: Subscription<SupervisorEnvelope>,
        delegation: String,
    ) {
        let Some((token, peer)) = &self.to else {
            return std::future::pending().await;
        };
        let mut n = 0u32;
        while let Some(env) = events.recv().await {
            let Some(origin) = env.event.origin() else {
                continue;
            };
            if origin.delegation_id != delegation {
                continue;
            }
            n += 1;
            let message = match &env.event {
                arbor_protocol::SupervisorEvent::DelegationChildEvent { child_event, .. } => {
                    format!("{}: {}", origin.child_id, child_event.event.type_name())
                }
                e => format!("{}: {}", origin.child_id, e.type_name()),
            };
            let param =
                ProgressNotificationParam::new(token.clone(), f64::from(n)).with_message(message);
            // A client that went away gets no more; the call itself ends on its own.
            if peer.notify_progress(param).await.is_err() {
                return std::future::pending().await;
            }
        }
        std::future::pending().await
    }
}
