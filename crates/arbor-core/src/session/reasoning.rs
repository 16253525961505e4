//! What a transcript keeps of a turn's reasoning: the blocks as the model produced them,
//! redacted like every entry. A signed block that redaction changed could never be sent
//! back (its signature would not match), and the API wants a turn's signed blocks back all
//! or none: when redaction changed any of them, the turn's thinking blocks are kept as plain
//! text and its encrypted ones dropped. The live session keeps the originals for the run's
//! next turns.

use std::sync::Arc;

use arbor_protocol::Reasoning;

use crate::redact::{Redactor, redact_serde};

/// The blocks a `reasoning` entry keeps.
pub(crate) fn stored(redactor: Option<&Arc<dyn Redactor>>, blocks: &[Reasoning]) -> Vec<Reasoning> {
    let Some(r) = redactor else {
        return blocks.to_vec();
    };
    // Each block redacted, and whether redaction changed it; `None` where it failed (the
    // block is dropped).
    let redacted: Vec<Option<(bool, Reasoning)>> = blocks
        .iter()
        .map(|b| match redact_serde(r.as_ref(), b) {
            Ok(None) => Some((false, b.clone())),
            Ok(Some(clean)) => Some((true, clean)),
            Err(_) => None,
        })
        .collect();
    let signed_changed = redacted
        .iter()
        .zip(blocks)
        .any(|(r, b)| b.is_signed() && r.as_ref().is_none_or(|(changed, _)| *changed));
    redacted
        .into_iter()
        .flatten()
        .filter_map(|(_, b)| match b {
            Reasoning::Thinking { thinking, .. } if signed_changed => {
                Some(Reasoning::Text { text: thinking })
            }
            Reasoning::RedactedThinking { .. } if signed_changed => None,
            other => Some(other),
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
        // One changed: the turn's thinking all kept as text, its encrypted block dropped.
        assert_eq!(
            stored(Some(&r), &[clean.clone(), secret, sealed]),
            [
                Reasoning::Text {
                    text: "plan".into()
                },
                Reasoning::Text {
                    text: "the key is [REDACTED]".into()
                }
            ]
        );
        // Nothing changed: every block kept as it is.
        let untouched = Reasoning::RedactedThinking { data: "enc".into() };
        assert_eq!(
            stored(Some(&r), &[clean.clone(), untouched.clone()]),
            [clean, untouched]
        );
    }
}
