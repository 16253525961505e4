//! Token usage.
//!
//! One [`Usage`] value is what a provider turn reported, or a sum of such values. The runtime
//! keeps several sums apart (a session's own usage, what its descendants used, the aggregate);
//! this type only knows how to add.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// Tokens reported by a model provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Input plus output (providers report it; we keep it consistent when they do not).
    pub total_tokens: u64,
    /// Prompt tokens served from a provider cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to a provider cache.
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Usage of one turn with `input` prompt and `output` completion tokens.
    pub fn new(input: u64, output: u64) -> Self {
        Self {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input.saturating_add(output),
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        }
    }

    /// The same usage with `total_tokens` at least `input + output`, for providers that leave
    /// the total out.
    pub fn normalized(mut self) -> Self {
        let sum = self.input_tokens.saturating_add(self.output_tokens);
        if self.total_tokens < sum {
            self.total_tokens = sum;
        }
        self
    }

    /// True when no token was counted.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

impl Add for Usage {
    type Output = Usage;

    fn add(self, rhs: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(rhs.input_tokens),
            output_tokens: self.output_tokens.saturating_add(rhs.output_tokens),
            total_tokens: self.total_tokens.saturating_add(rhs.total_tokens),
            cache_read_tokens: self.cache_read_tokens.saturating_add(rhs.cache_read_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_add(rhs.cache_write_tokens),
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        *self = *self + rhs;
    }
}

impl std::iter::Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), Add::add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_field_by_field_and_saturates() {
        let a = Usage::new(10, 5);
        let b = Usage {
            cache_read_tokens: 3,
            ..Usage::new(1, 1)
        };
        let sum = a + b;
        assert_eq!(sum.input_tokens, 11);
        assert_eq!(sum.output_tokens, 6);
        assert_eq!(sum.total_tokens, 17);
        assert_eq!(sum.cache_read_tokens, 3);
        let max = Usage::new(u64::MAX, 1);
        assert_eq!((max + max).input_tokens, u64::MAX);
    }

    #[test]
    fn normalized_fills_a_missing_total() {
        let u = Usage {
            input_tokens: 7,
            output_tokens: 2,
            ..Usage::default()
        };
        assert_eq!(u.normalized().total_tokens, 9);
    }
}
