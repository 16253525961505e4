//! `[pricing]`: what the spec's models cost, so every turn's cost is stored with its usage.
//!
//! ```toml
//! [pricing]
//! currency = "USD"          # the default
//! missing = "warn"          # a model without a price: "error" | "zero" | "warn" (default)
//! builtin = true            # start from arbor's dated table of OpenAI and Anthropic prices
//!
//! [pricing."claude-sonnet-4*"]   # a model, or a pattern where `*` is any run of characters
//! input = 3.0                    # per million prompt tokens
//! output = 15.0                  # per million generated tokens
//! cache_read = 0.30              # per million tokens read from the cache (default: input)
//! cache_write = 3.75             # per million tokens written to it (default: input)
//! ```
//!
//! The scripted provider is free: a model only scripted agents run costs zero unless the
//! table prices it.

use std::collections::BTreeMap;
use std::sync::Arc;

use arbor_core::pricing::{Missing, Price, PriceTable};
use serde::Deserialize;

use super::{Spec, SpecError};

/// `[pricing]` as written: its settings and its models' prices, by pattern.
#[derive(Debug, Clone, Default)]
pub(crate) struct PricingSpec {
    currency: Option<String>,
    missing: Missing,
    builtin: bool,
    models: BTreeMap<String, PriceSpec>,
}

/// One model's prices, in currency units per million tokens.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceSpec {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

impl<'de> Deserialize<'de> for PricingSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let table = BTreeMap::<String, toml::Value>::deserialize(d)?;
        let mut out = PricingSpec {
            builtin: true,
            ..PricingSpec::default()
        };
        for (key, value) in table {
            match (key.as_str(), value) {
                ("currency", toml::Value::String(c)) => out.currency = Some(c),
                ("missing", toml::Value::String(m)) => {
                    out.missing = match m.as_str() {
                        "error" => Missing::Error,
                        "zero" => Missing::Zero,
                        "warn" => Missing::Warn,
                        other => {
                            return Err(D::Error::custom(format!(
                                "pricing.missing must be \"error\", \"zero\" or \"warn\", not \
                                 {other:?}"
                            )));
                        }
                    }
                }
                ("builtin", toml::Value::Boolean(b)) => out.builtin = b,
                ("currency" | "missing" | "builtin", _) => {
                    return Err(D::Error::custom(format!(
                        "pricing.{key} has the wrong type (currency and missing are strings, \
                         builtin is true or false)"
                    )));
                }
                (_, toml::Value::Table(t)) => {
                    let price = toml::Value::Table(t).try_into::<PriceSpec>().map_err(|e| {
                        D::Error::custom(format!(
                            "pricing.{key:?}: {}",
                            e.message().replace('\n', " ").trim()
                        ))
                    })?;
                    out.models.insert(key, price);
                }
                _ => {
                    return Err(D::Error::custom(format!(
                        "pricing.{key:?} must be a table of prices ([pricing.\"MODEL\"] with \
                         input and output per million tokens), or one of currency, missing, \
                         builtin"
                    )));
                }
            }
        }
        Ok(out)
    }
}

/// `budget = { max_tree_tokens = N, max_tree_cost = X }`: a pool for a subtree, money in
/// the price table's currency.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetSpec {
    max_tree_tokens: Option<u64>,
    max_tree_cost: Option<f64>,
    /// The share spent (percent) at which `budget_low` fires (default 80).
    low_percent: Option<u8>,
}

impl BudgetSpec {
    /// A pool of these limits (checked by [`BudgetSpec::budget`]).
    pub(crate) fn new(max_tree_tokens: Option<u64>, max_tree_cost: Option<f64>) -> Self {
        Self {
            max_tree_tokens,
            max_tree_cost,
            low_percent: None,
        }
    }

    /// The pool; a limit of 0, or an amount that is not a positive number, is refused
    /// naming it.
    pub(crate) fn budget(&self) -> Result<arbor_core::budget::Budget, String> {
        arbor_core::budget::Budget::from_units(
            self.max_tree_tokens,
            self.max_tree_cost,
            self.low_percent,
        )
        .map_err(|(field, message)| format!("{field}: {message}"))
    }
}

impl PricingSpec {
    /// No `[pricing]` table: the built-in prices, a warning for a model without one.
    pub(super) fn on() -> Self {
        Self {
            builtin: true,
            ..Self::default()
        }
    }
}

impl PriceSpec {
    fn price(&self, model: &str) -> Result<Price, SpecError> {
        let amounts = [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
        ];
        for (field, amount) in amounts {
            if let Some(a) = amount
                && !(a.is_finite() && (0.0..1_000_000.0).contains(&a))
            {
                return Err(error(format!(
                    "pricing.{model:?}.{field} must be a price per million tokens from 0 to \
                     999999, not {a}"
                )));
            }
        }
        Ok(Price::per_million(self.input, self.output).cache(
            self.cache_read.unwrap_or(self.input),
            self.cache_write.unwrap_or(self.input),
        ))
    }
}

fn error(message: String) -> SpecError {
    SpecError {
        table: Some("pricing".to_owned()),
        message,
    }
}

impl Spec {
    /// The price table every agent of the spec is costed with: the built-in prices (unless
    /// `builtin = false`), the spec's over them, and a zero price for each model only
    /// scripted agents run that neither prices.
    pub(super) fn resolve_pricing(&mut self) -> Result<(), SpecError> {
        let p = &self.pricing;
        let mut builder = PriceTable::builder().missing(p.missing);
        if p.builtin {
            builder = builder.builtin();
        }
        if let Some(c) = &p.currency {
            builder = builder.currency(c.clone());
        }
        for (model, price) in &p.models {
            builder = builder.price(model.clone(), price.price(model)?);
        }
        let priced = builder_clone(p)?;
        let mut free = Vec::new();
        for agent in self.agents.values() {
            if agent.provider != "scripted" {
                continue;
            }
            for model in std::iter::once(&agent.model).chain(&agent.allow_models) {
                if priced.price_of(model).is_none() {
                    free.push(model.clone());
                }
            }
        }
        for model in free {
            builder = builder.price(model, Price::default());
        }
        let table = Arc::new(builder.build().map_err(|e| error(e.to_string()))?);
        for agent in self.agents.values_mut() {
            agent.pricing = Some(table.clone());
        }
        Ok(())
    }

    /// The spec's price table (every agent shares it).
    pub(crate) fn price_table(&self) -> Option<Arc<PriceTable>> {
        self.agents.values().find_map(|a| a.pricing.clone())
    }
}

/// The table as written (without the scripted agents' free models), to ask what it prices.
fn builder_clone(p: &PricingSpec) -> Result<PriceTable, SpecError> {
    let mut builder = PriceTable::builder().missing(Missing::Zero);
    if p.builtin {
        builder = builder.builtin();
    }
    for (model, price) in &p.models {
        builder = builder.price(model.clone(), price.price(model)?);
    }
    builder.build().map_err(|e| error(e.to_string()))
}
