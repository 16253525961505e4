//! The live view of a tree on a terminal: while `arbor run` (or `resume`) runs, a compact
//! tree on stderr, redrawn in place a few times a second: one line per live session (its
//! state, elapsed time, own and subtree tokens, the last tool it called), the children that
//! are done collapsed to one line per parent. It reads the store (as a later `arbor tree`
//! would), so what it shows is what is recorded. Colours unless `NO_COLOR` is set; on
//! anything but a terminal (or `TERM=dumb`, or `--progress lines`) the progress lines of
//! [`crate::render::progress`] are printed instead.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{EntryKind, Message, SessionId, SessionStatus, Timestamp};
use arbor_store::{SessionQuery, SessionRecord, Store};
use tokio_util::sync::CancellationToken;

use crate::render::report::thousands;

/// How often the view is redrawn (when something changed).
const TICK: Duration = Duration::from_millis(150);
/// The most transcript entries read per live session and tick.
const READ: usize = 64;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Progress {
    /// The live tree on a terminal, lines elsewhere.
    #[default]
    Auto,
    /// The live tree (on a terminal).
    Live,
    /// One line per event.
    Lines,
}

/// Whether the live view is drawn: asked for (or `auto`), stderr is a terminal that can
/// move its cursor.
pub(crate) fn wanted(progress: Progress) -> bool {
    let terminal =
        std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
    match progress {
        Progress::Lines => false,
        Progress::Auto | Progress::Live => terminal,
    }
}

/// Whether colours are wanted (`NO_COLOR` unset or empty).
fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// One session as the view shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) depth: u32,
    pub(crate) status: SessionStatus,
    pub(crate) elapsed_ms: u64,
    pub(crate) own: u64,
    pub(crate) subtree: u64,
    /// The subtree's cost, in micro-units (0 without prices: not shown).
    pub(crate) cost: u64,
    pub(crate) last_tool: Option<String>,
    /// Done children collapsed under it: how many, by status word.
    pub(crate) done: Vec<(String, usize)>,
}

fn live(s: SessionStatus) -> bool {
    matches!(
        s,
        SessionStatus::Running
            | SessionStatus::Suspended
            | SessionStatus::Idle
            | SessionStatus::Queued
    )
}

/// The lines of the view: each node indented by depth, the done children of a node
/// collapsed on the line after it. `width` cuts every line (0: no cut).
pub(crate) fn render(nodes: &[Node], width: usize, colour: bool) -> Vec<String> {
    let name_w = nodes
        .iter()
        .map(|n| 2 * n.depth as usize + n.name.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = Vec::new();
    for n in nodes {
        let indent = "  ".repeat(n.depth as usize);
        let status = n.status.to_string();
        let painted = if colour {
            let code = match n.status {
                SessionStatus::Running => "36",
                SessionStatus::Suspended => "33",
                SessionStatus::Succeeded => "32",
                SessionStatus::Idle | SessionStatus::Queued => "2",
                _ => "31",
            };
            format!("\x1b[{code}m{status:<10}\x1b[0m")
        } else {
            format!("{status:<10}")
        };
        let mut line = format!(
            "{:<name_w$}  {painted} {:>7}  own {:>8} | tree {:>8}",
            format!("{indent}{}", n.name),
            seconds(n.elapsed_ms),
            thousands(n.own),
            thousands(n.subtree),
        );
        if n.cost > 0 {
            line.push_str(&format!(" ({})", crate::render::report::money(n.cost)));
        }
        match (&n.status, &n.last_tool) {
            (SessionStatus::Suspended, _) => line.push_str("  waiting for approval"),
            (_, Some(tool)) => line.push_str(&format!("  {tool}")),
            _ => {}
        }
        out.push(cut(&line, width, colour));
        if !n.done.is_empty() {
            let total: usize = n.done.iter().map(|(_, c)| c).sum();
            let each: Vec<String> = n.done.iter().map(|(s, c)| format!("{c} {s}")).collect();
            out.push(cut(
                &format!("{indent}  … {total} done ({})", each.join(", ")),
                width,
                colour,
            ));
        }
    }
    out
}

fn seconds(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}

/// `line` cut to `width` visible characters (colour codes do not count).
fn cut(line: &str, width: usize, colour: bool) -> String {
    if width == 0 {
        return line.to_owned();
    }
    let mut out = String::new();
    let mut visible = 0;
    let mut in_escape = false;
    for c in line.chars() {
        if c == '\x1b' {
            in_escape = true;
        }
        if in_escape {
            out.push(c);
            if c == 'm' {
                in_escape = false;
            }
            continue;
        }
        if visible + 1 >= width {
            out.push('…');
            if colour {
                out.push_str("\x1b[0m");
            }
            return out;
        }
        out.push(c);
        visible += 1;
    }
    out
}

/// The tree under `root` as nodes, in tree order: live sessions (and the root), each with
/// its done children collapsed.
pub(crate) fn nodes(
    sessions: &[SessionRecord],
    root: SessionId,
    since: Timestamp,
    now: Timestamp,
    tools: &HashMap<SessionId, String>,
) -> Vec<Node> {
    let mut kids: HashMap<SessionId, Vec<&SessionRecord>> = HashMap::new();
    let mut parent_of: HashMap<SessionId, SessionId> = HashMap::new();
    for s in sessions.iter().filter(|s| s.tombstone.is_none()) {
        if let Some(p) = s.parent_id {
            kids.entry(p).or_default().push(s);
            parent_of.insert(s.id, p);
        }
    }
    // Shown: every live session and the sessions above it (a running grandchild under a
    // child that is done still shows, with its path).
    let mut shown: std::collections::HashSet<SessionId> = std::collections::HashSet::new();
    for s in sessions
        .iter()
        .filter(|s| s.tombstone.is_none() && live(s.status))
    {
        let mut at = Some(s.id);
        while let Some(id) = at {
            if !shown.insert(id) {
                break;
            }
            at = parent_of.get(&id).copied();
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<&SessionRecord> = sessions.iter().filter(|s| s.id == root).collect();
    while let Some(s) = stack.pop() {
        let children = kids.get(&s.id).map(Vec::as_slice).unwrap_or_default();
        let mut done: Vec<(String, usize)> = Vec::new();
        for c in children.iter().filter(|c| !shown.contains(&c.id)) {
            let word = c.status.to_string();
            match done.iter_mut().find(|(w, _)| *w == word) {
                Some((_, n)) => *n += 1,
                None => done.push((word, 1)),
            }
        }
        let started = s.created_at.max(since);
        let until = if live(s.status) { now } else { s.updated_at };
        out.push(Node {
            name: s.name.clone(),
            depth: s.depth.saturating_sub(sessions_depth(sessions, root)),
            status: s.status,
            elapsed_ms: until.0.saturating_sub(started.0),
            own: s.own_usage.total_tokens,
            subtree: s.aggregate_usage().total_tokens,
            cost: s.aggregate_cost(),
            last_tool: tools.get(&s.id).cloned(),
            done,
        });
        // Newest last on screen: pushed in reverse.
        for c in children.iter().rev().filter(|c| shown.contains(&c.id)) {
            stack.push(c);
        }
    }
    out
}

fn sessions_depth(sessions: &[SessionRecord], root: SessionId) -> u32 {
    sessions
        .iter()
        .find(|s| s.id == root)
        .map_or(0, |s| s.depth)
}

/// Draws the view of the tree under `root` on stderr until `done` fires, then erases it.
pub(crate) async fn follow(store: Arc<dyn Store>, root: SessionId, done: CancellationToken) {
    let since = Timestamp::now();
    let colour = colour();
    let mut tools: HashMap<SessionId, String> = HashMap::new();
    let mut cursors: HashMap<SessionId, u64> = HashMap::new();
    let mut last: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = done.cancelled() => break,
        }
        let Ok(sessions) = store.list_sessions(SessionQuery::Tree(root)).await else {
            continue;
        };
        for s in sessions.iter().filter(|s| live(s.status)) {
            let after = cursors.get(&s.id).copied().unwrap_or(0);
            let Ok(entries) = store.transcript(s.id, after, Some(READ)).await else {
                continue;
            };
            for e in &entries {
                if let EntryKind::Message {
                    message: Message::Assistant { tool_calls, .. },
                } = &e.kind
                    && let Some(call) = tool_calls.last()
                {
                    tools.insert(s.id, call.name.clone());
                }
            }
            if let Some(e) = entries.last() {
                cursors.insert(s.id, e.seq);
            }
        }
        let nodes = nodes(&sessions, root, since, Timestamp::now(), &tools);
        let mut lines = render(&nodes, width(), colour);
        // Each budget pool: spent of its limit, and what calls in flight hold.
        if let Ok(pools) = arbor_core::budget::pools(store.as_ref(), root).await {
            let name = |id: SessionId| {
                sessions
                    .iter()
                    .find(|s| s.id == id)
                    .map_or_else(|| id.to_string(), |s| s.name.clone())
            };
            lines.extend(crate::render::report::pool_lines(&pools, &name, ""));
        }
        if lines != last || !crate::render::output::frame_shown() {
            crate::render::output::draw_frame(&lines);
            last = lines;
        }
    }
    crate::render::output::draw_frame(&[]);
}

/// The terminal's width in columns (0 when unknown: lines are not cut).
fn width() -> usize {
    #[cfg(unix)]
    {
        rustix::termios::tcgetwinsize(std::io::stderr()).map_or(0, |w| usize::from(w.ws_col))
    }
    #[cfg(not(unix))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::Usage;

    #[test]
    fn a_running_grandchild_shows_with_the_done_child_above_it() {
        let mut root = SessionRecord::new_root("root", "root", "scripted");
        root.status = SessionStatus::Running;
        let mut done = SessionRecord::new_child(&root, "lead", "lead", "scripted");
        done.status = SessionStatus::Succeeded;
        let mut deep = SessionRecord::new_child(&done, "deep", "deep", "scripted");
        deep.status = SessionStatus::Running;
        let nodes = nodes(
            &[root.clone(), done, deep],
            root.id,
            Timestamp(0),
            root.created_at,
            &HashMap::new(),
        );
        let names: Vec<(&str, u32, bool)> = nodes
            .iter()
            .map(|n| (n.name.as_str(), n.depth, n.done.is_empty()))
            .collect();
        assert_eq!(
            names,
            [("root", 0, true), ("lead", 1, true), ("deep", 2, true)]
        );
    }

    #[test]
    fn live_sessions_show_done_ones_collapse() {
        let mut root = SessionRecord::new_root("root", "root", "scripted");
        root.status = SessionStatus::Running;
        root.own_usage = Usage::new(1000, 200);
        root.attributed_usage = Usage::new(500, 0);
        let mut a = SessionRecord::new_child(&root, "api", "api", "scripted");
        a.status = SessionStatus::Running;
        a.own_usage = Usage::new(400, 100);
        let mut b = SessionRecord::new_child(&root, "tests", "tests", "scripted");
        b.status = SessionStatus::Succeeded;
        let mut c = SessionRecord::new_child(&root, "audit", "audit", "scripted");
        c.status = SessionStatus::Failed;
        let mut tools = HashMap::new();
        tools.insert(a.id, "read_file".to_owned());
        let now = Timestamp(root.created_at.0 + 2500);
        let nodes = nodes(&[root.clone(), a, b, c], root.id, Timestamp(0), now, &tools);
        let lines = render(&nodes, 0, false);
        assert_eq!(
            lines,
            [
                "root   running       2.5s  own    1,200 | tree    1,700",
                "  … 2 done (1 succeeded, 1 failed)",
                "  api  running       2.5s  own      500 | tree      500  read_file",
            ]
            .map(String::from)
            .to_vec(),
            "{lines:#?}"
        );
        // Cut to the terminal's width, colour codes not counted.
        let coloured = render(&nodes, 20, true);
        assert!(coloured[0].contains("\x1b[36m"), "{coloured:?}");
        assert!(coloured[0].ends_with("…\x1b[0m"), "{coloured:?}");
    }
}
