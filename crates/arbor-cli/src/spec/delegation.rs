//! Which delegation tools each agent of a spec gets (`delegation_tools`): the ones it lists,
//! checked, or by default what its children's modes need. A parent gets `spawn_agent`, the
//! handle tools `wait_agent` and `cancel_agent`, and `send_message` (message-mode and
//! session children are followed up with it), plus `find_models` when a child may run
//! another model or thinking level; `list_children` and `rename_child` only when listed. A
//! child without children gets `send_message` (it has a parent to reply to); a root without
//! children gets none.

use arbor_core::supervisor::DELEGATION_TOOLS;

use crate::spec::{Spec, SpecError};

/// Resolves and checks every agent's delegation tools (`AgentSpec::delegation`).
pub(crate) fn resolve(spec: &mut Spec) -> Result<(), SpecError> {
    let root = spec.root_name().map_err(SpecError::plain)?.to_owned();
    let mut resolved = Vec::with_capacity(spec.agents.len());
    for (name, agent) in &spec.agents {
        let tools = match &agent.delegation_tools {
            Some(listed) => {
                check(listed, !agent.children.is_empty())
                    .map_err(|e| SpecError::agent(name, format!("delegation_tools: {e}")))?;
                listed.clone()
            }
            None if agent.children.is_empty() && *name == root => Vec::new(),
            None if agent.children.is_empty() => vec!["send_message".to_owned()],
            None => {
                let mut tools: Vec<String> =
                    ["send_message", "spawn_agent", "wait_agent", "cancel_agent"]
                        .map(str::to_owned)
                        .to_vec();
                let choice = agent.children.iter().any(|c| {
                    spec.agents
                        .get(c)
                        .is_some_and(|a| !a.allow_models.is_empty() || a.thinking_levels.len() > 1)
                });
                if choice {
                    tools.push("find_models".to_owned());
                }
                tools
            }
        };
        resolved.push((name.clone(), tools));
    }
    for (name, tools) in resolved {
        if let Some(agent) = spec.agents.get_mut(&name) {
            agent.delegation = tools;
        }
    }
    Ok(())
}

/// A listed set: known names, once each; tools that act on children only with children,
/// and `spawn_agent` whenever there are children to reach.
fn check(listed: &[String], has_children: bool) -> Result<(), String> {
    for (i, name) in listed.iter().enumerate() {
        if !DELEGATION_TOOLS.contains(&name.as_str()) {
            return Err(format!(
                "unknown tool {name:?} (known: {})",
                DELEGATION_TOOLS.join(", ")
            ));
        }
        if listed[..i].contains(name) {
            return Err(format!("{name:?} is listed twice"));
        }
        if !has_children && name != "send_message" {
            return Err(format!(
                "{name:?} acts on children, and the agent has none (children = [...])"
            ));
        }
    }
    if has_children && !listed.iter().any(|n| n == "spawn_agent") {
        return Err("list spawn_agent: without it the agent cannot reach its children".to_owned());
    }
    Ok(())
}
