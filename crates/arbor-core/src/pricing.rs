//! What model calls cost: a [`PriceTable`] of per-model [`Price`]s (input, output, cache-read
//! and cache-write prices per million tokens), matched exactly or by a `*` glob, and the cost
//! of one turn's [`Usage`] in integer micro-units of the table's currency (no float drift:
//! each turn's cost is rounded once, to the nearest micro-unit, and costs add as integers).
//!
//! A model without a price is a choice the host makes loudly ([`Missing`]): an error, a
//! zero cost, or a zero cost and one warning per model (the default).
//!
//! ```
//! use arbor_core::pricing::{Price, PriceTable};
//! use arbor_protocol::Usage;
//!
//! let table = PriceTable::builder()
//!     .price("claude-sonnet-4*", Price::per_million(3.0, 15.0).cache(0.30, 3.75))
//!     .build()
//!     .unwrap();
//! // 1,000 prompt tokens (600 read from the cache) and 200 generated.
//! let mut usage = Usage::new(1_000, 200);
//! usage.cache_read_tokens = 600;
//! let cost = table.cost("claude-sonnet-4-5", &usage).unwrap();
//! // 400 × $3/M + 600 × $0.30/M + 200 × $15/M = $0.00438
//! assert_eq!(cost, Some(4_380));
//! ```

use std::collections::BTreeSet;
use std::sync::Mutex;

use arbor_protocol::Usage;

use crate::error::{CoreError, CoreResult};

/// Micro-units (millionths) of a currency in one unit.
pub const MICROS: u64 = 1_000_000;

/// What a model's tokens cost, in micro-units of the table's currency per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Price {
    /// Per million prompt tokens not read from or written to a cache.
    pub input: u64,
    /// Per million generated tokens.
    pub output: u64,
    /// Per million prompt tokens read from the provider's cache.
    pub cache_read: u64,
    /// Per million prompt tokens written to the provider's cache.
    pub cache_write: u64,
}

/// A price in currency units (`2.5`) as micro-units, refusing what is not a finite,
/// non-negative amount below a million units per million tokens.
fn micros(units: f64) -> Option<u64> {
    (units.is_finite() && (0.0..1_000_000.0).contains(&units))
        .then(|| (units * MICROS as f64).round() as u64)
}

impl Price {
    /// Input and output prices in currency units per million tokens (`3.0`, `15.0`); cache
    /// reads and writes cost as input until [`Price::cache`] says otherwise. A negative or
    /// non-finite amount counts as zero (a table's builder refuses it by name).
    pub fn per_million(input: f64, output: f64) -> Self {
        let input = micros(input).unwrap_or(0);
        Self {
            input,
            output: micros(output).unwrap_or(0),
            cache_read: input,
            cache_write: input,
        }
    }

    /// With cache-read and cache-write prices, in currency units per million tokens.
    #[must_use]
    pub fn cache(mut self, read: f64, write: f64) -> Self {
        self.cache_read = micros(read).unwrap_or(0);
        self.cache_write = micros(write).unwrap_or(0);
        self
    }

    /// The cost of `usage`, in micro-units, rounded to the nearest one. A usage's input
    /// counts its cache reads and writes (both wires report them so); they are priced apart.
    pub fn cost(&self, usage: &Usage) -> u64 {
        let cached = usage
            .cache_read_tokens
            .saturating_add(usage.cache_write_tokens);
        let plain = usage.input_tokens.saturating_sub(cached);
        // Token counts times micro-units per million: summed in u128, divided once.
        let sum = u128::from(plain) * u128::from(self.input)
            + u128::from(usage.output_tokens) * u128::from(self.output)
            + u128::from(usage.cache_read_tokens) * u128::from(self.cache_read)
            + u128::from(usage.cache_write_tokens) * u128::from(self.cache_write);
        let rounded = (sum + u128::from(MICROS / 2)) / u128::from(MICROS);
        u64::try_from(rounded).unwrap_or(u64::MAX)
    }
}

/// What a cost is for a model the table has no price for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missing {
    /// The turn's cost is an error naming the model.
    Error,
    /// It costs nothing, silently.
    Zero,
    /// It costs nothing, and a warning names the model once.
    #[default]
    Warn,
}

/// Per-model prices, matched by exact name first, then by the longest `*` glob.
#[derive(Debug, Default)]
pub struct PriceTable {
    currency: String,
    exact: Vec<(String, Price)>,
    globs: Vec<(String, Price)>,
    missing: Missing,
    /// Models already warned about (a warning per model, per table).
    warned: Mutex<BTreeSet<String>>,
}

/// When the built-in prices ([`PriceTableBuilder::builtin`]) were last checked against the
/// providers' published price lists.
pub const BUILTIN_PRICES_AS_OF: &str = "2025-11";

/// The built-in prices, in USD per million tokens: `(pattern, input, output, cache read,
/// cache write)`. A convenience that may be stale (see [`BUILTIN_PRICES_AS_OF`]); long-context
/// surcharges, batch and priority tiers are not in it. Anthropic's cache writes are the
/// 5-minute ones (1.25 × input); OpenAI charges no cache writes.
const BUILTIN: [(&str, f64, f64, f64, f64); 19] = [
    ("gpt-5*", 1.25, 10.0, 0.125, 1.25),
    ("gpt-5-pro*", 15.0, 120.0, 15.0, 15.0),
    ("gpt-5-mini*", 0.25, 2.0, 0.025, 0.25),
    ("gpt-5-nano*", 0.05, 0.4, 0.005, 0.05),
    ("gpt-4.1*", 2.0, 8.0, 0.5, 2.0),
    ("gpt-4.1-mini*", 0.4, 1.6, 0.1, 0.4),
    ("gpt-4.1-nano*", 0.1, 0.4, 0.025, 0.1),
    ("gpt-4o*", 2.5, 10.0, 1.25, 2.5),
    ("gpt-4o-mini*", 0.15, 0.6, 0.075, 0.15),
    ("o3*", 2.0, 8.0, 0.5, 2.0),
    ("o3-pro*", 20.0, 80.0, 20.0, 20.0),
    ("o4-mini*", 1.1, 4.4, 0.275, 1.1),
    ("claude-opus-4*", 15.0, 75.0, 1.5, 18.75),
    ("claude-opus-4-5*", 5.0, 25.0, 0.5, 6.25),
    ("claude-sonnet-4*", 3.0, 15.0, 0.3, 3.75),
    ("claude-3-7-sonnet*", 3.0, 15.0, 0.3, 3.75),
    ("claude-haiku-4-5*", 1.0, 5.0, 0.1, 1.25),
    ("claude-3-5-haiku*", 0.8, 4.0, 0.08, 1.0),
    ("claude-3-haiku*", 0.25, 1.25, 0.03, 0.3),
];

/// Builds a [`PriceTable`].
#[derive(Debug, Default)]
pub struct PriceTableBuilder {
    currency: Option<String>,
    prices: Vec<(String, Price)>,
    missing: Missing,
}

impl PriceTableBuilder {
    /// Starts from the built-in prices of common OpenAI and Anthropic models (USD, as of
    /// [`BUILTIN_PRICES_AS_OF`]; they may be stale): a later [`price`](Self::price) for the
    /// same pattern replaces one, and any exact name wins over them.
    #[must_use]
    pub fn builtin(mut self) -> Self {
        for (model, input, output, read, write) in BUILTIN {
            self = self.price(model, Price::per_million(input, output).cache(read, write));
        }
        self
    }

    /// The price of `model`: a name, or a pattern where `*` stands for any run of
    /// characters (`claude-sonnet-4*`). A later price for the same pattern replaces it.
    #[must_use]
    pub fn price(mut self, model: impl Into<String>, price: Price) -> Self {
        let model = model.into();
        self.prices.retain(|(m, _)| *m != model);
        self.prices.push((model, price));
        self
    }

    /// The currency the prices are in (default `USD`).
    #[must_use]
    pub fn currency(mut self, currency: impl Into<String>) -> Self {
        self.currency = Some(currency.into());
        self
    }

    /// What a model without a price costs (default [`Missing::Warn`]).
    #[must_use]
    pub fn missing(mut self, missing: Missing) -> Self {
        self.missing = missing;
        self
    }

    /// The table; a blank pattern or currency is refused naming it.
    pub fn build(self) -> CoreResult<PriceTable> {
        let currency = self.currency.unwrap_or_else(|| "USD".to_owned());
        if currency.trim().is_empty() || currency.len() > 16 {
            return Err(CoreError::invalid(
                "currency",
                "currency must be 1 to 16 characters (USD, EUR, ...)",
            ));
        }
        let mut table = PriceTable {
            currency,
            missing: self.missing,
            ..PriceTable::default()
        };
        for (model, price) in self.prices {
            if model.trim().is_empty() {
                return Err(CoreError::invalid("pricing", "a price names no model"));
            }
            if model.contains('*') {
                table.globs.push((model, price));
            } else {
                table.exact.push((model, price));
            }
        }
        // Longest pattern first: the most specific glob wins.
        table
            .globs
            .sort_by_key(|(pattern, _)| std::cmp::Reverse(pattern.len()));
        Ok(table)
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
pub(crate) fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl PriceTable {
    /// A builder.
    pub fn builder() -> PriceTableBuilder {
        PriceTableBuilder::default()
    }

    /// The currency of its prices and costs.
    pub fn currency(&self) -> &str {
        &self.currency
    }

    /// The price of `model`: its own, else the longest pattern that matches it.
    pub fn price_of(&self, model: &str) -> Option<Price> {
        if let Some((_, p)) = self.exact.iter().find(|(m, _)| m == model) {
            return Some(*p);
        }
        self.globs
            .iter()
            .find(|(pattern, _)| glob(pattern, model))
            .map(|(_, p)| *p)
    }

    /// Refuses `model` (naming the `pricing` field) when it has no price and a missing
    /// price is an error: what a build or an admission checks before any call is made.
    pub fn require(&self, model: &str) -> CoreResult<()> {
        if self.missing == Missing::Error && self.price_of(model).is_none() {
            return Err(missing_error(model));
        }
        Ok(())
    }

    /// The cost of `usage` on `model`, in micro-units: `Some` with a price; for a model
    /// without one, per [`Missing`]: an error naming it, or `None` (counted as zero; with
    /// `Warn`, a warning names the model the first time).
    pub fn cost(&self, model: &str, usage: &Usage) -> CoreResult<Option<u64>> {
        if let Some(price) = self.price_of(model) {
            return Ok(Some(price.cost(usage)));
        }
        match self.missing {
            Missing::Error => Err(missing_error(model)),
            Missing::Zero => Ok(None),
            Missing::Warn => {
                let first = self
                    .warned
                    .lock()
                    .map(|mut w| w.insert(model.to_owned()))
                    .unwrap_or(false);
                if first {
                    tracing::warn!(
                        model,
                        "model has no price: its calls count as costing nothing (set a price, \
                         or pricing.missing = \"zero\")"
                    );
                }
                Ok(None)
            }
        }
    }
}

fn missing_error(model: &str) -> CoreError {
    CoreError::invalid(
        "pricing",
        format!("model {model:?} has no price (pricing.missing = \"error\")"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_of_characters() {
        for (pattern, name, matches) in [
            ("gpt-4o*", "gpt-4o-2024-08-06", true),
            ("gpt-4o*", "gpt-4o", true),
            ("gpt-4o*", "gpt-4", false),
            ("*-mini", "gpt-4o-mini", true),
            ("claude-*-4*", "claude-sonnet-4-5", true),
            ("claude-*-4*", "claude-3-haiku", false),
            ("a*a", "a", false),
            ("*", "", true),
        ] {
            assert_eq!(glob(pattern, name), matches, "{pattern} {name}");
        }
    }

    #[test]
    fn the_exact_name_wins_then_the_longest_pattern() {
        let t = PriceTable::builder()
            .price("gpt-4o*", Price::per_million(2.5, 10.0))
            .price("gpt-4o-mini*", Price::per_million(0.15, 0.6))
            .price("gpt-4o-mini-tts", Price::per_million(0.6, 12.0))
            .build()
            .unwrap();
        assert_eq!(t.price_of("gpt-4o-2024").unwrap().input, 2_500_000);
        assert_eq!(t.price_of("gpt-4o-mini-2024").unwrap().input, 150_000);
        assert_eq!(t.price_of("gpt-4o-mini-tts").unwrap().output, 12_000_000);
        assert!(t.price_of("o3").is_none());
    }

    #[test]
    fn costs_are_integer_micro_units_rounded_once_per_turn() {
        let p = Price::per_million(3.0, 15.0).cache(0.3, 3.75);
        let mut u = Usage::new(10_000, 1_000);
        u.cache_read_tokens = 6_000;
        u.cache_write_tokens = 2_000;
        // 2,000 plain × 3 + 6,000 × 0.3 + 2,000 × 3.75 + 1,000 × 15, per million.
        assert_eq!(p.cost(&u), 6_000 + 1_800 + 7_500 + 15_000);
        // A third of a micro-unit rounds down; two thirds round up.
        let tiny = Price::per_million(0.333_333, 0.666_667);
        assert_eq!(tiny.cost(&Usage::new(1, 0)), 0);
        assert_eq!(tiny.cost(&Usage::new(0, 1)), 1);
        // Huge counts saturate, never wrap.
        assert_eq!(
            Price::per_million(999_999.0, 0.0).cost(&Usage::new(u64::MAX, 0)),
            u64::MAX
        );
    }

    #[test]
    fn a_missing_price_is_an_error_a_zero_or_a_warning() {
        let u = Usage::new(100, 10);
        let t = |m| PriceTable::builder().missing(m).build().unwrap();
        let e = t(Missing::Error).cost("mystery", &u).unwrap_err();
        assert_eq!(e.field(), Some("pricing"));
        assert_eq!(
            e.to_string(),
            "model \"mystery\" has no price (pricing.missing = \"error\")"
        );
        assert_eq!(t(Missing::Zero).cost("mystery", &u).unwrap(), None);
        let warn = t(Missing::Warn);
        assert_eq!(warn.cost("mystery", &u).unwrap(), None);
        assert_eq!(warn.warned.lock().unwrap().len(), 1);
        assert_eq!(warn.cost("mystery", &u).unwrap(), None);
        assert_eq!(
            warn.warned.lock().unwrap().len(),
            1,
            "warned once per model"
        );
    }

    #[test]
    fn the_builtin_table_prices_common_models_and_is_overridable() {
        let t = PriceTable::builder()
            .builtin()
            .price("claude-sonnet-4*", Price::per_million(2.0, 10.0))
            .build()
            .unwrap();
        // Dated suffixes match their family; the more specific family wins.
        assert_eq!(
            t.price_of("gpt-4o-mini-2024-07-18").unwrap().output,
            600_000
        );
        assert_eq!(t.price_of("gpt-4o-2024-08-06").unwrap().output, 10_000_000);
        assert_eq!(
            t.price_of("claude-opus-4-5-20251101").unwrap().input,
            5_000_000
        );
        assert_eq!(
            t.price_of("claude-opus-4-1-20250805").unwrap().input,
            15_000_000
        );
        assert_eq!(
            t.price_of("claude-haiku-4-5").unwrap(),
            Price::per_million(1.0, 5.0).cache(0.1, 1.25)
        );
        // Overridden.
        assert_eq!(t.price_of("claude-sonnet-4-5").unwrap().input, 2_000_000);
        assert!(t.price_of("llama-3").is_none());
    }

    #[test]
    fn a_blank_pattern_or_currency_is_refused_by_name() {
        let e = PriceTable::builder()
            .price(" ", Price::default())
            .build()
            .unwrap_err();
        assert_eq!(e.field(), Some("pricing"));
        let e = PriceTable::builder().currency("").build().unwrap_err();
        assert_eq!(e.field(), Some("currency"));
    }
}
