//! The commands that work on files, not on a store: `arbor validate` (a spec checked as
//! `arbor run` checks it, nothing run or stored), `arbor init` (a commented starter spec),
//! `arbor completions` (clap's generator) and `arbor man` (the man page, roff).

use std::path::Path;

use arbor_protocol::LimitKind;
use clap::CommandFactory;
use serde_json::json;

use crate::cli::{Cli, CompletionsArgs, InitArgs, ValidateArgs};
use crate::drive::{Overrides, prepare_with};
use crate::fail::Fail;
use crate::input::read_spec;
use crate::store::io_reason;
use crate::{render::output, render::report::thousands};

/// `arbor validate SPEC`: reads, parses and checks the spec in full (every agent built,
/// every child, provider, limit, tool and MCP grant resolved, the secrets' redaction
/// checked), without asking any model or opening any store. The error is `arbor run`'s,
/// with the file and line.
pub(crate) async fn validate(args: ValidateArgs) -> Result<u8, Fail> {
    let (path, text) = read_spec(&args.spec)?;
    let overrides = Overrides::from(&args.overrides);
    let prepared = prepare_with(&path, &text, &overrides, args.online).await?;
    let spec = &prepared.spec;
    let root = spec.root_name().map_err(Fail::usage)?.to_owned();
    let (agents, warnings) = agents_json(spec, &root);
    if args.json {
        output::out(
            &json!({
                "spec": path,
                "ok": true,
                "fingerprint": spec.fingerprint,
                "task": (!spec.task.trim().is_empty()).then_some(&spec.task),
                "agents": agents,
                "mcp_servers": spec.mcp_servers.keys().collect::<Vec<_>>(),
                "models_checked": args.online,
                "warnings": warnings,
            })
            .to_string(),
        );
        return Ok(0);
    }
    output::out(&format!(
        "{path}: ok: {} agent(s), root {root}{}",
        spec.agents.len(),
        if args.online {
            ", the root's model checked with its provider"
        } else {
            " (no model was asked: --online checks the root's)"
        }
    ));
    for (name, a) in &spec.agents {
        let mut line = format!("  {name}: {} {}", a.provider, a.model);
        if !a.children.is_empty() {
            line.push_str(&format!(", children {}", a.children.join(" ")));
        }
        if !a.tools.is_empty() {
            line.push_str(&format!(", tools {}", a.tools.join(" ")));
        }
        let l = provenance(spec, &root, name).effective();
        line.push_str(&format!(
            ", limits {} steps, {} tool calls, {} tokens, {} ms",
            l.max_steps,
            l.max_tool_calls,
            thousands(l.max_tokens),
            thousands(l.timeout_ms)
        ));
        output::out(&line);
    }
    if spec.task.trim().is_empty() {
        output::out("  no task: give one with arbor run --task");
    }
    for w in &warnings {
        output::err(&format!("warning: {w}"));
    }
    Ok(0)
}

/// Each agent's limits as its runs get them: the root's under `[supervisor] limits`, a
/// child's under the supervisor's ceiling over children too.
fn provenance(spec: &crate::spec::Spec, root: &str, name: &str) -> crate::spec::limits::Provenance {
    let own = spec.agents.get(name).map(|a| a.limits).unwrap_or_default();
    crate::spec::limits::Provenance {
        agent: name.to_owned(),
        own,
        supervisor: spec.supervisor.limits,
        child: name != root,
    }
}

/// The agents of `arbor validate --json`, each with its effective limits and where each was
/// set, and the warnings of limits a ceiling lowered.
fn agents_json(spec: &crate::spec::Spec, root: &str) -> (Vec<serde_json::Value>, Vec<String>) {
    let mut warnings = Vec::new();
    let agents = spec
        .agents
        .iter()
        .map(|(name, a)| {
            let p = provenance(spec, root, name);
            let effective = p.effective();
            let lowered = p.lowered();
            warnings.extend(lowered.iter().map(|l| l.warning(name)));
            let limits: serde_json::Map<String, serde_json::Value> = LimitKind::RUN
                .iter()
                .map(|&kind| {
                    let mut v = json!({
                        "value": effective.get(kind),
                        "from": p.origin(kind).as_str(),
                    });
                    if let Some(l) = lowered.iter().find(|l| l.kind == kind) {
                        v["written"] = json!(l.written);
                        v["raise"] = json!(l.raise);
                    }
                    (kind.to_string(), v)
                })
                .collect();
            json!({
                "name": name,
                "root": name == root,
                "provider": a.provider,
                "model": a.model,
                "children": a.children,
                "tools": a.tools,
                "workspace": a.workspace,
                "limits": limits,
            })
        })
        .collect();
    (agents, warnings)
}

/// The starter spec `arbor init` writes.
pub(crate) const STARTER: &str = include_str!("starter.toml");

/// `arbor init [PATH]`: writes the starter spec (default `arbor.toml`); never overwrites a
/// file unless `--force`.
pub(crate) fn init(args: InitArgs) -> Result<u8, Fail> {
    let path = &args.path;
    if path.exists() && !args.force {
        return Err(Fail::usage(format!(
            "{} exists: pass --force to overwrite it",
            path.display()
        )));
    }
    write_new(path, STARTER).map_err(|e| {
        Fail::usage(format!(
            "cannot write {}: {}",
            path.display(),
            io_reason(&e)
        ))
    })?;
    output::out(&format!(
        "wrote {p}: run it with `arbor run {p}` (scripted, offline); set a real model in its \
         [providers.main] section",
        p = path.display()
    ));
    Ok(0)
}

fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

/// `arbor completions SHELL`: the completion script for SHELL, on stdout.
pub(crate) fn completions(args: CompletionsArgs) -> Result<u8, Fail> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "arbor", &mut out);
    output::out(String::from_utf8_lossy(&out).trim_end());
    Ok(0)
}

/// `arbor man`: the man page (roff), on stdout: `arbor man > arbor.1`.
pub(crate) fn man() -> Result<u8, Fail> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|e| Fail::usage(format!("cannot render the man page: {e}")))?;
    output::out(String::from_utf8_lossy(&out).trim_end());
    Ok(0)
}
