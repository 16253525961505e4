//! What is wrong with a spec, and where: [`SpecError`] names the table an error is about, and
//! [`at`] puts the line of that table's header in front of it.

/// A spec that cannot be used: what is wrong, and the table it is about (`agents.NAME`,
/// `supervisor`, `mcp_servers.NAME`), whose line [`at`] puts in front of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpecError {
    /// The table, when the error is about one.
    pub(crate) table: Option<String>,
    /// What is wrong (an agent's error starts `agent "NAME": `).
    pub(crate) message: String,
}

impl SpecError {
    /// An error of agent `name`'s table.
    pub(crate) fn agent(name: &str, e: impl std::fmt::Display) -> Self {
        Self {
            table: Some(format!("agents.{name}")),
            message: format!("agent {name:?}: {e}"),
        }
    }

    /// An error of the `[supervisor]` table.
    pub(crate) fn supervisor(e: impl std::fmt::Display) -> Self {
        Self {
            table: Some("supervisor".to_owned()),
            message: format!("supervisor: {e}"),
        }
    }

    /// An error of MCP server `name`'s table (its message names it already).
    pub(crate) fn mcp(name: &str, e: impl std::fmt::Display) -> Self {
        Self {
            table: Some(format!("mcp_servers.{name}")),
            message: e.to_string(),
        }
    }

    /// An error about no one table.
    pub(crate) fn plain(e: impl std::fmt::Display) -> Self {
        Self {
            table: None,
            message: e.to_string(),
        }
    }
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The error `e` of the spec `text` read from `path`, as `path:line: e` when it is about a
/// table the text has (the line of its header), else `path: e`.
pub(crate) fn at(path: &str, text: &str, e: &SpecError) -> String {
    match e.table.as_deref().and_then(|t| table_line(text, t)) {
        Some(line) => format!("{path}:{line}: {e}"),
        None => format!("{path}: {e}"),
    }
}

/// The line of the first header (`[T]`, `[[T.…]]`, `[T.…]`) or dotted key (`T.… =`) of the
/// table `t`.
fn table_line(text: &str, t: &str) -> Option<usize> {
    let quoted = t.split_once('.').map(|(a, b)| format!("{a}.\"{b}\""));
    text.lines()
        .position(|line| {
            let l = line.trim_start().trim_start_matches('[').trim_start();
            [Some(t.to_owned()), quoted.clone()]
                .iter()
                .flatten()
                .any(|t| {
                    l.strip_prefix(t.as_str())
                        .is_some_and(|rest| rest.starts_with([']', '.', ' ', '=']))
                })
        })
        .map(|i| i + 1)
}
