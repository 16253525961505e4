//! Failures of a command and the exit codes they end the process with.

use arbor_core::{CoreError, CoreErrorKind, DenyReason};

/// The root run ended failed, aborted or denied.
pub(crate) const EXIT_RUN: u8 = 1;
/// The root run is suspended, waiting for approvals.
pub(crate) const EXIT_SUSPENDED: u8 = 4;
/// Bad usage or a bad spec.
pub(crate) const EXIT_USAGE: u8 = 2;
/// The store cannot be opened, is locked, or failed.
pub(crate) const EXIT_STORE: u8 = 3;

/// A failed command: the exit code and a one-line message (printed as `error: <message>`),
/// with the kind of the runtime error it came from, for code that tells cases apart (never
/// by the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fail {
    /// The exit code.
    pub(crate) code: u8,
    /// What went wrong.
    pub(crate) message: String,
    /// The runtime error's kind and refusal reason, when it came from one.
    pub(crate) source: Option<(CoreErrorKind, Option<DenyReason>)>,
}

impl Fail {
    /// Bad usage or a bad spec (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_USAGE,
            message: message.into(),
            source: None,
        }
    }

    /// A store failure (exit 3).
    pub(crate) fn store(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_STORE,
            message: message.into(),
            source: None,
        }
    }

    /// A runtime error: store failures exit 3, invalid configuration 2, the rest 1.
    pub(crate) fn core(err: CoreError) -> Self {
        let code = match err.kind() {
            CoreErrorKind::Store => EXIT_STORE,
            CoreErrorKind::Validation | CoreErrorKind::NotFound => EXIT_USAGE,
            _ => EXIT_RUN,
        };
        Self {
            code,
            message: err.to_string(),
            source: Some((err.kind(), err.deny_reason())),
        }
    }

    /// Whether it came from a runtime error of `kind`.
    pub(crate) fn is(&self, kind: CoreErrorKind) -> bool {
        self.source.is_some_and(|(k, _)| k == kind)
    }

    /// Whether it came from a refusal for `reason`.
    pub(crate) fn denied_for(&self, reason: DenyReason) -> bool {
        self.source.is_some_and(|(_, r)| r == Some(reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_store::StoreError;

    #[test]
    fn core_errors_map_to_exit_codes() {
        let locked = CoreError::Store(StoreError::Locked {
            path: "x.db".into(),
        });
        let fail = Fail::core(locked);
        assert_eq!(fail.code, EXIT_STORE);
        assert_eq!(fail.message, "store x.db is locked by another process");
        assert_eq!(
            Fail::core(CoreError::Validation("bad".into())).code,
            EXIT_USAGE
        );
        assert_eq!(Fail::core(CoreError::Supervisor("x".into())).code, EXIT_RUN);
    }
}
