//! Messages between sessions: replies, follow-ups and lifecycle notices.
//!
//! A message is delivered into its target's inbox: first durably, as an `inbox_received`
//! entry of the target's transcript, then to the live session if there is one. The target's
//! next turn reads what is pending (recording an `inbox_read` entry), so a message survives a
//! restart until it has been read.

use serde::{Deserialize, Serialize};

use crate::ids::{SessionId, Timestamp};

/// Who sent a message, seen from its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relationship {
    /// The target's parent.
    Parent,
    /// One of the target's children.
    Child,
    /// A child of the target's parent.
    Sibling,
    /// The host (a user, the CLI, the runtime itself).
    Host,
}

impl Relationship {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Parent => "parent",
            Self::Child => "child",
            Self::Sibling => "sibling",
            Self::Host => "host",
        }
    }
}

/// A lifecycle notice the runtime sends a parent about a child that answers by message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Notice {
    /// The child finished its first task without sending its parent anything.
    CompletedWithoutReply {
        /// Its last text, whitespace collapsed, at most 160 characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preview: Option<String>,
    },
    /// A run of the child failed.
    Failed {
        /// Why.
        error: String,
    },
    /// A run of the child was cancelled.
    Cancelled {
        /// Why, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// One message in an inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxMessage {
    /// `msg_<uuid>`.
    pub id: String,
    /// The sending session (none for the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<SessionId>,
    /// The sender's name.
    pub from_name: String,
    /// The sender, seen from the target.
    pub relationship: Relationship,
    /// The body.
    pub text: String,
    /// Set for a lifecycle notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<Notice>,
    /// When it was sent.
    pub at: Timestamp,
}

impl InboxMessage {
    /// How the target's model reads it: a first line naming the sender, then the body.
    pub fn envelope(&self) -> String {
        let from = match self.relationship {
            Relationship::Parent => "[from parent]".to_owned(),
            Relationship::Host => "[from host]".to_owned(),
            r => format!("[from {}:{}]", r.as_str(), self.from_name),
        };
        let kind = if self.notice.is_some() {
            " (runtime notice)"
        } else {
            ""
        };
        format!("{from}{kind}\n\n{}", self.text)
    }
}
