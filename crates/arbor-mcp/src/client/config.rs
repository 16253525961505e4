//! How a spec declares an MCP server (`[mcp_servers.NAME]`) and grants its tools
//! (`tools = ["mcp:NAME/*", "mcp:NAME/TOOL"]`), checked strictly; `${VAR}` references in
//! arguments, environment values and headers are read from the environment when the server
//! starts (so a kept definition holds no secret).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default time a server has to start and list its tools.
pub const DEFAULT_STARTUP_MS: u64 = 10_000;
/// The default time one tool call may take.
pub const DEFAULT_CALL_MS: u64 = 60_000;
/// The default cap on a tool's result, in bytes (the rest is cut with a marker).
pub const DEFAULT_RESULT_BYTES: u64 = 256 * 1024;
const MAX_STARTUP_MS: u64 = 120_000;
const MAX_CALL_MS: u64 = 30 * 60 * 1000;
const MAX_RESULT_BYTES: u64 = 8 * 1024 * 1024;

/// Variables every stdio server gets from arbor's environment (nothing else leaks to it).
pub const PASSED_ENV: [&str; 7] = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// One MCP server: a command over stdio, or a Streamable HTTP URL.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The program to start (stdio).
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment, besides PATH, HOME, USER, LANG, LC_ALL, TMPDIR and TZ (values may
    /// read `${VAR}`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// The server's URL (Streamable HTTP).
    pub url: Option<String>,
    /// Headers sent with each request (values may read `${VAR}`: put secrets there).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long it has to start and list its tools, in ms (default 10000, at most 120000).
    pub startup_timeout_ms: Option<u64>,
    /// How long one call may take, in ms (default 60000, at most 1800000).
    pub call_timeout_ms: Option<u64>,
    /// The most of a result an agent reads, in bytes (default 262144, at most 8 MiB).
    pub max_result_bytes: Option<u64>,
}

/// A server name: 1 to 32 of `a-z 0-9 _ -`, starting with a letter or digit.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

impl ServerConfig {
    /// Checks the declaration of server `name`; the error names the field.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        let at = |field: &str| format!("mcp_servers.{name}.{field}");
        if !valid_server_name(name) {
            return Err(format!(
                "mcp_servers.{name}: a server name is 1-32 of a-z 0-9 _ - (starting with a letter or digit)"
            ));
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(format!(
                    "mcp_servers.{name}: give either command (a server over stdio) or url (Streamable HTTP)"
                ));
            }
            (Some(c), None) => {
                if c.trim().is_empty() {
                    return Err(format!("{}: must not be empty", at("command")));
                }
                if !self.headers.is_empty() {
                    return Err(format!("{}: headers are for a url server", at("headers")));
                }
            }
            (None, Some(u)) => {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(format!("{}: must be an http:// or https:// URL", at("url")));
                }
                for field in ["args", "env", "cwd"] {
                    let set = match field {
                        "args" => !self.args.is_empty(),
                        "env" => !self.env.is_empty(),
                        _ => self.cwd.is_some(),
                    };
                    if set {
                        return Err(format!("{}: is for a command server", at(field)));
                    }
                }
            }
        }
        let refs = self
            .args
            .iter()
            .map(|v| ("args", v))
            .chain(self.env.values().map(|v| ("env", v)))
            .chain(self.headers.values().map(|v| ("headers", v)));
        for (field, value) in refs {
            variables(value).map_err(|e| format!("{}: {e}", at(field)))?;
        }
        let bounded = [
            (
                "startup_timeout_ms",
                self.startup_timeout_ms,
                MAX_STARTUP_MS,
            ),
            ("call_timeout_ms", self.call_timeout_ms, MAX_CALL_MS),
            ("max_result_bytes", self.max_result_bytes, MAX_RESULT_BYTES),
        ];
        for (field, value, max) in bounded {
            if let Some(v) = value
                && (v == 0 || v > max)
            {
                return Err(format!(
                    "{}: must be a positive integer at most {max}",
                    at(field)
                ));
            }
        }
        Ok(())
    }

    /// The environment variables its `${VAR}` references name that are not set, each with
    /// where it is read (`mcp_servers.NAME.env.KEY`).
    pub fn missing_variables(&self, name: &str) -> Vec<String> {
        let mut missing = Vec::new();
        let mut check = |place: String, value: &str| {
            for var in variables(value).unwrap_or_default() {
                if std::env::var_os(&var).is_none() {
                    missing.push(format!("{var} (mcp_servers.{name}.{place})"));
                }
            }
        };
        for (i, a) in self.args.iter().enumerate() {
            check(format!("args[{i}]"), a);
        }
        for (k, v) in &self.env {
            check(format!("env.{k}"), v);
        }
        for (k, v) in &self.headers {
            check(format!("headers.{k}"), v);
        }
        missing
    }

    pub(crate) fn startup(&self) -> Duration {
        Duration::from_millis(self.startup_timeout_ms.unwrap_or(DEFAULT_STARTUP_MS))
    }

    pub(crate) fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms.unwrap_or(DEFAULT_CALL_MS))
    }

    pub(crate) fn result_cap(&self) -> usize {
        usize::try_from(self.max_result_bytes.unwrap_or(DEFAULT_RESULT_BYTES)).unwrap_or(usize::MAX)
    }
}

/// The variables `${NAME}` in `value` reads; an unclosed or empty reference is an error.
fn variables(value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("unclosed ${{ in {value:?}"));
        };
        let var = &after[..end];
        if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("${{{var}}} is not a variable name (A-Z a-z 0-9 _)"));
        }
        out.push(var.to_owned());
        rest = &after[end + 1..];
    }
    Ok(out)
}

/// `value` with its `${VAR}` references read from the environment; `place` says where a
/// missing one was read.
pub(crate) fn expand(value: &str, place: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("{place}: unclosed ${{"))?;
        let var = &after[..end];
        let v = std::env::var(var)
            .map_err(|_| format!("environment variable {var} is not set ({place})"))?;
        out.push_str(&v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A grant of MCP tools: `mcp:NAME/*` (every tool of server NAME) or `mcp:NAME/TOOL`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// The server.
    pub server: String,
    /// One tool, or every tool (`None`).
    pub tool: Option<String>,
}

impl Grant {
    /// Parses `mcp:NAME/*` or `mcp:NAME/TOOL`; `None` when `text` is not an MCP grant at all
    /// (it does not start with `mcp:`), an error when it is one, malformed.
    pub fn parse(text: &str) -> Option<Result<Grant, String>> {
        let rest = text.strip_prefix("mcp:")?;
        let bad = || format!("{text:?}: an MCP grant is mcp:SERVER/* or mcp:SERVER/TOOL");
        let Some((server, tool)) = rest.split_once('/') else {
            return Some(Err(bad()));
        };
        if !valid_server_name(server) || tool.is_empty() || tool.contains('/') {
            return Some(Err(bad()));
        }
        Some(Ok(Grant {
            server: server.to_owned(),
            tool: (tool != "*").then(|| tool.to_owned()),
        }))
    }

    /// Whether it grants `tool` of `server`.
    pub fn allows(&self, server: &str, tool: &str) -> bool {
        self.server == server && self.tool.as_deref().is_none_or(|t| t == tool)
    }

    /// What both grant: AND-narrowing (`None` when nothing).
    pub fn and(&self, other: &Grant) -> Option<Grant> {
        if self.server != other.server {
            return None;
        }
        match (&self.tool, &other.tool) {
            (None, t) | (t, None) => Some(Grant {
                server: self.server.clone(),
                tool: t.clone(),
            }),
            (Some(a), Some(b)) if a == b => Some(self.clone()),
            _ => None,
        }
    }
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "mcp:{}/{}",
            self.server,
            self.tool.as_deref().unwrap_or("*")
        )
    }
}

/// What both lists grant (each of `a` narrowed by `b`).
pub fn narrow(a: &[Grant], b: &[Grant]) -> Vec<Grant> {
    let mut out: Vec<Grant> = a
        .iter()
        .flat_map(|x| b.iter().filter_map(|y| x.and(y)))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The name an agent sees for `tool` of `server`: `mcp__SERVER__TOOL` (servers cannot
/// collide); `None` when it would not be a valid tool name (1-64 of `A-Z a-z 0-9 _ -`).
pub fn tool_name(server: &str, tool: &str) -> Option<String> {
    let name = format!("mcp__{server}__{tool}");
    let ok = name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_and_narrow() {
        let all = Grant::parse("mcp:files/*").unwrap().unwrap();
        let read = Grant::parse("mcp:files/read").unwrap().unwrap();
        let other = Grant::parse("mcp:web/*").unwrap().unwrap();
        assert!(Grant::parse("echo").is_none());
        assert!(Grant::parse("mcp:files").unwrap().is_err());
        assert!(Grant::parse("mcp:Files/x").unwrap().is_err());
        assert_eq!(all.and(&read), Some(read.clone()));
        assert_eq!(read.and(&all), Some(read.clone()));
        assert_eq!(all.and(&other), None);
        assert_eq!(
            narrow(&[all.clone(), other.clone()], std::slice::from_ref(&read)),
            vec![read.clone()]
        );
        assert!(narrow(std::slice::from_ref(&other), &[all, read]).is_empty());
        assert_eq!(other.to_string(), "mcp:web/*");
    }

    #[test]
    fn declarations_are_checked_naming_the_field() {
        let both = ServerConfig {
            command: Some("x".into()),
            url: Some("http://h".into()),
            ..ServerConfig::default()
        };
        assert!(both.validate("s").unwrap_err().contains("either command"));
        let url = ServerConfig {
            url: Some("ftp://h".into()),
            ..ServerConfig::default()
        };
        assert_eq!(
            url.validate("s").unwrap_err(),
            "mcp_servers.s.url: must be an http:// or https:// URL"
        );
        let env = ServerConfig {
            command: Some("x".into()),
            env: [("K".to_owned(), "${NOPE".to_owned())].into(),
            ..ServerConfig::default()
        };
        assert!(
            env.validate("s")
                .unwrap_err()
                .starts_with("mcp_servers.s.env: unclosed")
        );
        let t = ServerConfig {
            command: Some("x".into()),
            call_timeout_ms: Some(0),
            ..ServerConfig::default()
        };
        assert_eq!(
            t.validate("s").unwrap_err(),
            "mcp_servers.s.call_timeout_ms: must be a positive integer at most 1800000"
        );
        assert!(ServerConfig::default().validate("Bad").is_err());
    }

    #[test]
    fn references_expand_from_the_environment() {
        assert_eq!(expand("plain", "p").unwrap(), "plain");
        let e = expand(
            "Bearer ${ARBOR_MCP_SURELY_UNSET_VAR}",
            "headers.Authorization",
        )
        .unwrap_err();
        assert_eq!(
            e,
            "environment variable ARBOR_MCP_SURELY_UNSET_VAR is not set (headers.Authorization)"
        );
        let c = ServerConfig {
            url: Some("http://h".into()),
            headers: [(
                "Authorization".to_owned(),
                "Bearer ${ARBOR_MCP_SURELY_UNSET_VAR}".to_owned(),
            )]
            .into(),
            ..ServerConfig::default()
        };
        assert_eq!(
            c.missing_variables("s"),
            vec!["ARBOR_MCP_SURELY_UNSET_VAR (mcp_servers.s.headers.Authorization)"]
        );
        assert_eq!(
            tool_name("files", "read"),
            Some("mcp__files__read".to_owned())
        );
        assert_eq!(tool_name("files", "a.b"), None);
    }
}
