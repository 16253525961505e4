//! An agent's `context`: whether a spawn of it may fork its parent's conversation into it.
//!
//! ```toml
//! [agents.reviewer]
//! context = "allow"                 # the default: the spawn chooses (none unless it asks)
//! # context = "forbid"              # a spawn that asks is refused
//! # context = "all"                 # every spawn forks the whole conversation
//! # context = { last_turns = 2 }    # every spawn forks the parent's last two turns
//! ```

use arbor_core::session::fork::{ContextPolicy, ForkContext};
use serde::Deserialize;

/// `context` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContextSpec(pub(crate) ContextPolicy);

impl<'de> Deserialize<'de> for ContextSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        match value.as_str() {
            Some("allow") => return Ok(Self(ContextPolicy::Allowed)),
            Some("forbid") => return Ok(Self(ContextPolicy::Forbidden)),
            Some("none") => {
                return Err(serde::de::Error::custom(
                    "context = \"none\" is every spawn's default: write \"allow\" (or \"forbid\")",
                ));
            }
            _ => {}
        }
        serde_json::from_value::<ForkContext>(value)
            .map(|fork| Self(ContextPolicy::Required(fork)))
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "context must be \"allow\", \"forbid\", \"all\" or {{ last_turns = N }} ({e})"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Agent {
        context: ContextSpec,
    }

    fn read(text: &str) -> Result<ContextPolicy, String> {
        toml::from_str::<Agent>(text)
            .map(|a| a.context.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn each_form_reads_and_a_bad_one_names_the_choices() {
        assert_eq!(read("context = \"allow\""), Ok(ContextPolicy::Allowed));
        assert_eq!(read("context = \"forbid\""), Ok(ContextPolicy::Forbidden));
        assert_eq!(
            read("context = \"all\""),
            Ok(ContextPolicy::Required(ForkContext::All))
        );
        assert_eq!(
            read("context = { last_turns = 2 }"),
            Ok(ContextPolicy::Required(ForkContext::LastTurns(2)))
        );
        let e = read("context = \"sometimes\"").unwrap_err();
        assert!(e.contains("context must be \"allow\", \"forbid\""), "{e}");
        assert!(read("context = { last_turns = 0 }").is_err());
    }
}
