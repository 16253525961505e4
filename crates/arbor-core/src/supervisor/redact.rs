//! Redaction: secrets are replaced before text leaves the supervisor.

use std::borrow::Cow;
use std::fmt;

/// Replaces secrets in text. Must be cheap and never fail.
pub trait Redactor: fmt::Debug + Send + Sync {
    /// `text` with every secret replaced.
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str>;
}

/// Replaces each exact secret string with `[REDACTED]`.
#[derive(Debug, Clone, Default)]
pub struct SecretRedactor {
    secrets: Vec<String>,
}

impl SecretRedactor {
    /// A redactor for these secrets (empty strings are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
        // Longest first, so a secret that contains another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Self { secrets }
    }
}

/// The text secrets are replaced with.
pub const REDACTED: &str = "[REDACTED]";

impl Redactor for SecretRedactor {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_every_occurrence_and_borrows_when_clean() {
        let r = SecretRedactor::new(["canary", "canary-long", ""]);
        assert_eq!(
            r.redact("a canary and canary-long"),
            "a [REDACTED] and [REDACTED]"
        );
        assert!(matches!(r.redact("clean"), Cow::Borrowed(_)));
    }
}
