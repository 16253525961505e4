//! Progress notifications: while a sync spawn or a wait runs, each event of the child's
//! delegation reaches a client that sent a progress token, as one notification; what was
//! published before the call returned is sent before its result.

use arbor_core::Subscription;
use arbor_protocol::{SupervisorEnvelope, SupervisorEvent};
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

    /// A forwarder of `delegation`'s events from `events`.
    pub(crate) fn forwarder(
        &self,
        events: Subscription<SupervisorEnvelope>,
        delegation: String,
    ) -> Forwarder {
        Forwarder {
            to: self.to.clone(),
            events,
            delegation,
            sent: 0,
            gone: false,
        }
    }
}

/// Sends one delegation's events as progress notifications.
pub(crate) struct Forwarder {
    to: Option<(ProgressToken, Peer<RoleServer>)>,
    events: Subscription<SupervisorEnvelope>,
    delegation: String,
    sent: u32,
    gone: bool,
}

impl Forwarder {
    /// Forwards events as they come; never returns (select it against the call).
    pub(crate) async fn run(&mut self) -> std::convert::Infallible {
        if self.to.is_some() {
            while let Some(env) = self.events.recv().await {
                self.send(&env.event).await;
            }
        }
        std::future::pending().await
    }

    /// Sends what was published and not yet sent.
    pub(crate) async fn flush(&mut self) {
        if self.to.is_none() {
            return;
        }
        while let Some(env) = self.events.try_recv() {
            self.send(&env.event).await;
        }
    }

    async fn send(&mut self, event: &SupervisorEvent) {
        let (Some((token, peer)), false) = (&self.to, self.gone) else {
            return;
        };
        let Some(origin) = event.origin() else {
            return;
        };
        if origin.delegation_id != self.delegation {
            return;
        }
        self.sent += 1;
        let message = match event {
            SupervisorEvent::DelegationChildEvent { child_event, .. } => {
                format!("{}: {}", origin.child_id, child_event.event.type_name())
            }
            e => format!("{}: {}", origin.child_id, e.type_name()),
        };
        let param = ProgressNotificationParam::new(token.clone(), f64::from(self.sent))
            .with_message(message);
        // A client that went away gets no more; the call itself ends on its own.
        if peer.notify_progress(param).await.is_err() {
            self.gone = true;
        }
    }
}
