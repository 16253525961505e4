//! Who is calling: bearer tokens mapped to tenants ([`Tenants`]), and the [`Tenant`] every
//! `/v1` handler receives.
//!
//! Tokens are never kept, only their SHA-256: a tokens file holds one `tenant sha256:<hex>`
//! per line (`#` starts a comment), followed by `operator` for a tenant that may read every
//! tenant's metrics and the process's own; [`Tenants::from_env_value`] reads
//! `tenant=token,…` (what `ARBOR_TOKENS` holds), hashing each token at once. With no token
//! configured the server is open, as the single tenant [`LOCAL_TENANT`], and must listen on
//! loopback only (the caller checks; `arbor serve` refuses anything else).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ErrorKind};

/// The tenant of an open server (no tokens), and of trees started by the CLI.
pub const LOCAL_TENANT: &str = "local";

/// The tenants a server knows, by the hash of their tokens.
#[derive(Clone, Default)]
pub struct Tenants {
    by_hash: Arc<HashMap<[u8; 32], String>>,
    /// The tenants that may read every tenant's metrics.
    operators: Arc<HashSet<String>>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("tokens", &self.by_hash.len())
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn valid_tenant(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Why a tokens file (or `ARBOR_TOKENS`) that names no token is refused: a server given one
/// would serve every request unauthenticated, as if it had none.
const NO_TOKEN: &str = "no token in it (lines `<tenant> sha256:<64 hex digits> [operator]`): a server \
     given no token would serve every request unauthenticated";

impl Tenants {
    /// No tokens: every request is [`LOCAL_TENANT`]'s.
    pub fn open() -> Self {
        Self::default()
    }

    /// Whether no token is configured.
    pub fn is_open(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// Reads a tokens file's text: `tenant sha256:<64 hex>` per line, then `operator` for a
    /// tenant that may read every tenant's metrics. The error names the line.
    pub fn from_file_text(text: &str) -> Result<Self, String> {
        let mut by_hash = HashMap::new();
        let mut operators = HashSet::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = || {
                format!(
                    "line {}: expected `<tenant> sha256:<64 hex digits> [operator]`",
                    n + 1
                )
            };
            let mut parts = line.split_whitespace();
            let (Some(tenant), Some(hash), role, None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            match role {
                None => {}
                Some("operator") => {
                    operators.insert(tenant.to_owned());
                }
                Some(other) => {
                    return Err(format!(
                        "line {}: unknown role {other:?} (the one role is `operator`)",
                        n + 1
                    ));
                }
            }
            if !valid_tenant(tenant) {
                return Err(format!(
                    "line {}: tenant {tenant:?} must be 1-64 of A-Z a-z 0-9 - _ .",
                    n + 1
                ));
            }
            let hex = hash.strip_prefix("sha256:").ok_or_else(bad)?;
            let bytes = decode_hex(hex).ok_or_else(bad)?;
            by_hash.insert(bytes, tenant.to_owned());
        }
        if by_hash.is_empty() {
            return Err(NO_TOKEN.to_owned());
        }
        Ok(Self {
            by_hash: Arc::new(by_hash),
            operators: Arc::new(operators),
        })
    }

    /// Whether `tenant` may read every tenant's metrics and the process's own.
    pub fn is_operator(&self, tenant: &str) -> bool {
        self.operators.contains(tenant)
    }

    /// Reads `tenant=token,tenant=token` (the value of `ARBOR_TOKENS`); each token is hashed
    /// at once and not kept.
    pub fn from_env_value(value: &str) -> Result<Self, String> {
        let mut by_hash = HashMap::new();
        for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((tenant, token)) = pair.split_once('=') else {
                return Err("expected tenant=token pairs separated by commas".to_owned());
            };
            let (tenant, token) = (tenant.trim(), token.trim());
            if !valid_tenant(tenant) {
                return Err(format!(
                    "tenant {tenant:?} must be 1-64 of A-Z a-z 0-9 - _ ."
                ));
            }
            if token.len() < 16 {
                return Err(format!(
                    "the token of tenant {tenant:?} is shorter than 16 characters"
                ));
            }
            by_hash.insert(digest(token), tenant.to_owned());
        }
        if by_hash.is_empty() {
            return Err(NO_TOKEN.to_owned());
        }
        Ok(Self {
            by_hash: Arc::new(by_hash),
            operators: Arc::default(),
        })
    }

    /// The line a tokens file holds for `tenant` with `token` (for `arbor serve --hash-token`).
    pub fn file_line(tenant: &str, token: &str) -> String {
        let hex: String = digest(token).iter().map(|b| format!("{b:02x}")).collect();
        format!("{tenant} sha256:{hex}")
    }

    /// The tenant whose token `authorization` (the header's value) carries.
    pub fn tenant_of(&self, authorization: Option<&str>) -> Result<String, ApiError> {
        if self.is_open() {
            return Ok(LOCAL_TENANT.to_owned());
        }
        let unauthorized = || {
            ApiError::new(
                ErrorKind::Unauthorized,
                "A bearer token is required (Authorization: Bearer <token>)",
            )
        };
        // The scheme is case-insensitive (RFC 9110 11.1): `Bearer`, `bearer`, `BEARER`.
        let token = authorization
            .and_then(|h| h.trim_start().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(unauthorized)?;
        self.by_hash
            .get(&digest(token))
            .cloned()
            .ok_or_else(unauthorized)
    }
}

/// The tenant a root record was started for.
pub(crate) fn tenant_of_root(root: &arbor_store::SessionRecord) -> &str {
    root.meta["tenant"].as_str().unwrap_or(LOCAL_TENANT)
}

fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(chunk).ok()?;
        *out.get_mut(i)? = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// The calling tenant, from the request's bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

impl<S> FromRequestParts<S> for Tenant
where
    S: Send + Sync,
    Tenants: axum::extract::FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let tenants = <Tenants as axum::extract::FromRef<S>>::from_ref(state);
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        tenants.tenant_of(header).map(Tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_holds_hashes_and_a_token_finds_its_tenant() {
        let line = Tenants::file_line("acme", "s3cret-token-of-acme");
        assert!(line.starts_with("acme sha256:") && !line.contains("s3cret"));
        let t = Tenants::from_file_text(&format!("# tokens\n{line}\n\n")).unwrap();
        assert_eq!(
            t.tenant_of(Some("Bearer s3cret-token-of-acme")).unwrap(),
            "acme"
        );
        let e = t.tenant_of(Some("Bearer wrong")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        assert_eq!(
            t.tenant_of(None).unwrap_err().kind(),
            ErrorKind::Unauthorized
        );
        assert_eq!(
            Tenants::from_file_text("acme md5:00").unwrap_err(),
            "line 1: expected `<tenant> sha256:<64 hex digits> [operator]`"
        );
        // A role after the hash: `operator`, or refused by name.
        let ops = Tenants::file_line("ops", "s3cret-token-of-ops!");
        let t = Tenants::from_file_text(&format!("{line}\n{ops} operator\n")).unwrap();
        assert!(t.is_operator("ops") && !t.is_operator("acme"));
        assert_eq!(
            Tenants::from_file_text(&format!("{ops} admin")).unwrap_err(),
            "line 1: unknown role \"admin\" (the one role is `operator`)"
        );
    }

    /// A tokens file or `ARBOR_TOKENS` that names no token is refused (it served open), and
    /// the bearer scheme is matched whatever its case.
    #[test]
    fn no_token_is_refused_and_the_scheme_is_case_insensitive() {
        for empty in ["", "# only a comment\n\n", "   \n"] {
            assert_eq!(Tenants::from_file_text(empty).unwrap_err(), NO_TOKEN);
        }
        assert_eq!(Tenants::from_env_value(" , ,").unwrap_err(), NO_TOKEN);
        let t = Tenants::from_env_value("a=aaaaaaaaaaaaaaaa").unwrap();
        for header in [
            "Bearer aaaaaaaaaaaaaaaa",
            "bearer aaaaaaaaaaaaaaaa",
            "BEARER aaaaaaaaaaaaaaaa",
            "  Bearer   aaaaaaaaaaaaaaaa ",
        ] {
            assert_eq!(t.tenant_of(Some(header)).unwrap(), "a", "{header:?}");
        }
        for header in [
            "Basic aaaaaaaaaaaaaaaa",
            "Bearer",
            "Beareraaaaaaaaaaaaaaaa",
            "aaaaaaaaaaaaaaaa",
        ] {
            assert_eq!(
                t.tenant_of(Some(header)).unwrap_err().kind(),
                ErrorKind::Unauthorized,
                "{header:?}"
            );
        }
    }

    #[test]
    fn an_open_server_is_the_local_tenant() {
        assert_eq!(Tenants::open().tenant_of(None).unwrap(), LOCAL_TENANT);
        let t = Tenants::from_env_value("a=aaaaaaaaaaaaaaaa, b=bbbbbbbbbbbbbbbb").unwrap();
        assert_eq!(t.tenant_of(Some("Bearer bbbbbbbbbbbbbbbb")).unwrap(), "b");
        assert!(Tenants::from_env_value("a=short").is_err());
    }
}
