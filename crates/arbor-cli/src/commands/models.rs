//! `arbor models`: the models each configured provider offers.

use crate::cli::ModelsArgs;
use crate::fail::Fail;
use crate::providers::{build, configured};
use crate::render::output;
use std::collections::BTreeMap;

/// `arbor models`: what the providers configured in the environment offer.
pub(crate) async fn list(args: ModelsArgs) -> Result<u8, Fail> {
    let names: Vec<&str> = match args.provider.as_deref() {
        Some(p @ ("openai" | "anthropic")) => vec![p],
        Some(p) => {
            return Err(Fail::usage(format!(
                "unknown provider {p:?} (openai or anthropic)"
            )));
        }
        None => [
            ("openai", configured(&["OPENAI_API_KEY", "OPENAI_BASE_URL"])),
            (
                "anthropic",
                configured(&["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]),
            ),
        ]
        .into_iter()
        .filter_map(|(n, on)| on.then_some(n))
        .collect(),
    };
    if names.is_empty() {
        return Err(Fail::usage(
            "no provider is configured: set OPENAI_API_KEY or OPENAI_BASE_URL, or \
             ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL"
                .to_owned(),
        ));
    }
    let mut rows = Vec::new();
    let mut failed = false;
    for name in names {
        let listed = match build(name, &BTreeMap::new()) {
            Ok(p) => p.models().await,
            Err(e) => Err(e),
        };
        match listed {
            Ok(ids) => rows.extend(ids.into_iter().map(|id| (name, id))),
            Err(e) => {
                failed = true;
                output::err(&format!("error: {e}"));
            }
        }
    }
    if args.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(p, id)| serde_json::json!({"provider": p, "model": id}))
            .collect();
        output::out(&serde_json::Value::from(v).to_string());
    } else {
        for (p, id) in &rows {
            output::out(&format!("{p}  {id}"));
        }
    }
    Ok(u8::from(failed))
}
