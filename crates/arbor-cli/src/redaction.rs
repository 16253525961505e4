//! The spec's `[redaction]` section: secrets to replace with `[REDACTED]` before anything
//! reaches the store, the events, the progress lines, the report or a parent model.
//!
//! ```toml
//! [redaction]
//! env = ["GITHUB_TOKEN", "DB_PASSWORD"]           # literal secrets: these variables' values
//! patterns = ['sk-[A-Za-z0-9]{20,}', 'ghp_\w{36}'] # regular expressions (regex-lite syntax)
//! ```
//!
//! The values are read from the environment when the tree is built (never stored). A variable
//! that is not set has nothing to leak and is skipped with a warning; a value shorter than 4
//! bytes is refused (redacting it would shred ordinary text).

use std::sync::Arc;

use arbor_core::{CoreError, CoreResult, Redactor, SecretRedactor};
use serde::Deserialize;

/// Shortest secret value accepted.
const MIN_SECRET_BYTES: usize = 4;

/// The `[redaction]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedactionSpec {
    /// Environment variables whose values are secrets.
    #[serde(default)]
    pub(crate) env: Vec<String>,
    /// Regular expressions whose matches are secrets.
    #[serde(default)]
    pub(crate) patterns: Vec<String>,
}

impl RedactionSpec {
    /// The redactor it describes, or `None` when it names nothing.
    pub(crate) fn redactor(&self) -> CoreResult<Option<Arc<dyn Redactor>>> {
        if self.env.is_empty() && self.patterns.is_empty() {
            return Ok(None);
        }
        let mut secrets = Vec::with_capacity(self.env.len());
        for name in &self.env {
            match std::env::var(name) {
                Ok(value) if value.len() < MIN_SECRET_BYTES => {
                    return Err(CoreError::Validation(format!(
                        "redaction.env: the value of {name} is shorter than {MIN_SECRET_BYTES} \
                         bytes, too short to redact safely"
                    )));
                }
                Ok(value) => secrets.push(value),
                Err(_) => {
                    tracing::warn!(variable = %name, "redaction.env: not set; nothing to redact for it");
                }
            }
        }
        let redactor = SecretRedactor::new(secrets)
            .with_patterns(&self.patterns)
            .map_err(|e| CoreError::Validation(format!("redaction.patterns: {e}")))?;
        Ok(Some(Arc::new(redactor)))
    }
}
