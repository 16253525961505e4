//! What a transcript keeps of a turn's reasoning: the blocks as the model produced them,
//! redacted like every entry. A signed block that redaction changed could never be sent
//! back (its signature would not match), so it is kept as plain text; an encrypted one it
//! changed is dropped. The live session keeps the originals for the run's next turns.

use std::sync::Arc;

use arbor_protocol::Reasoning;

use crate::redact::{Redactor, redact_serde};

/// The blocks a `reasoning` entry keeps.
pub(crate) fn stored(redactor: Option<&Arc<dyn Redactor>>, blocks: &[Reasoning]) -> Vec<Reasoning> {
    let Some(r) = redactor else {
        return blocks.to_vec();
    };
    blocks
        .iter()
        .filter_map(|b| match redact_serde(r.as_ref(), b) {
            Ok(None) => Some(b.clone()),
            Ok(Some(Reasoning::Thinking { thinking, .. })) => {
                Some(Reasoning::Text { text: thinking })
            }
            Ok(Some(Reasoning::RedactedThinking { .. })) | Err(_) => None,
            Ok(Some(text @ Reasoning::Text { .. })) => Some(text),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Hide;

    impl Redactor for Hide {
        fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
            if text.contains("sk-123") {
                text.replace("sk-123", "[REDACTED]").into()
            } else {
                text.into()
            }
        }
    }

    #[test]
    fn a_signed_block_redaction_changed_is_kept_as_text_only() {
        let r: Arc<dyn Redactor> = Arc::new(Hide);
        let clean = Reasoning::Thinking {
            thinking: "plan".into(),
            signature: "sig".into(),
        };
        let secret = Reasoning::Thinking {
            thinking: "the key is sk-123".into(),
            signature: "sig".into(),
        };
        let sealed = Reasoning::RedactedThinking {
            data: "xx sk-123".into(),
        };
        assert_eq!(
            stored(Some(&r), &[clean.clone(), secret, sealed]),
            [
                clean,
                Reasoning::Text {
                    text: "the key is [REDACTED]".into()
                }
            ]
        );
    }
}
