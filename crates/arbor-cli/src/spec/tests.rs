//! The spec's parsing and checks.
use super::*;

#[test]
fn unknown_keys_name_the_key_and_line() {
    let text = "task = \"x\"\n[agents.root]\nmodel = \"scripted\"\ntxet = 1\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert!(err.starts_with("s.toml:4: unknown field `txet`"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn references_are_checked() {
    let text = "task = \"x\"\n[agents.root]\nchildren = [\"ghost\"]\n[[agents.root.turns]]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:2: agent \"root\": child \"ghost\" is not defined"
    );
    let text = "task = \"x\"\n[agents.root]\ntools = [\"rm\"]\n[[agents.root.turns]]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:2: agent \"root\": unknown tool \"rm\" (known: echo, sleep, append_line, \
         read_file, write_file, list_dir, edit_file, run_command, mcp:SERVER/*, \
         mcp:SERVER/TOOL)"
    );
    let text = "task = \"x\"\n[agents.root]\nlimits = { max_steps = 100 }\n[[agents.root.turns]]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:2: agent \"root\": max_steps must be a positive integer at most 64"
    );
}

#[test]
fn coding_tools_need_a_worktree_and_a_workspace() {
    let head = "task = \"x\"\n[agents.root]\nchildren = [\"kid\"]\n[[agents.root.turns]]\n";
    let text = format!("{head}[agents.kid]\ntools = [\"edit_file\"]\n[[agents.kid.turns]]\n");
    let err = Spec::parse("s.toml", &text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:5: agent \"kid\": tool \"edit_file\" needs workspace = true (coding tools work \
         in the agent's own worktree)"
    );
    let text = format!("{head}[agents.kid]\nworkspace = true\n[[agents.kid.turns]]\n");
    let err = Spec::parse("s.toml", &text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:5: agent \"kid\": workspace = true needs a [workspace] table naming the repository"
    );
    let text = format!(
        "{head}[workspace]\n[agents.kid]\nworkspace = true\ntools = [\"edit_file\"]\n[[agents.kid.turns]]\n"
    );
    let mut spec = Spec::parse("s.toml", &text).unwrap();
    assert_eq!(
        spec.repository().unwrap_err(),
        "[workspace] names no repository: set repository or pass --repository"
    );
    spec.set_repository("/tmp/r".into());
    assert_eq!(
        spec.repository().unwrap(),
        Some(std::path::Path::new("/tmp/r"))
    );
    let text = "task = \"x\"\n[workspace]\nrepository = \"r\"\n[agents.root]\nworkspace = true\n[[agents.root.turns]]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert!(err.contains("the root cannot work in a worktree"), "{err}");
}

#[test]
fn roots_and_turns_are_checked() {
    let text = "task = \"x\"\n[agents.root]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:2: agent \"root\": the scripted provider needs at least one [[agents.root.turns]]"
    );
    let text = "task = \"x\"\nroot = \"boss\"\n[agents.a]\n[agents.b]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert_eq!(
        err,
        "s.toml: the root agent \"boss\" is not defined (agents: a, b)"
    );
    let text = "task = \"x\"\n[agents.only]\n[[agents.only.turns]]\ntext = \"hi\"\n";
    let spec = Spec::parse("s.toml", text).unwrap();
    assert_eq!(spec.root_name().unwrap(), "only");
    let text = "task = \"x\"\n[agents.root]\nprovider = \"gemini\"\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:2: agent \"root\": unknown provider \"gemini\" (known: scripted, openai, anthropic)"
    );
    // An HTTP provider needs no turns; a table may name its own.
    let text = "task = \"x\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\napi_key_env = \"LOCAL_KEY\"\n[agents.root]\nprovider = \"local\"\nmodel = \"m\"\n";
    let spec = Spec::parse("s.toml", text).unwrap();
    assert_eq!(
        spec.providers["local"].api_key_env.as_deref(),
        Some("LOCAL_KEY")
    );
    let text = "task = \"x\"\n[providers.local]\nkind = \"gemini\"\n[agents.root]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert!(err.contains("unknown variant `gemini`"), "{err}");
}

#[test]
fn malformed_toml_is_one_line_with_its_line() {
    let err = Spec::parse("s.toml", "task = \"x\"\n[agents.root\n").unwrap_err();
    assert!(err.starts_with("s.toml:2: "), "{err}");
    assert!(!err.contains('\n'), "{err}");
    let err = Spec::parse("s.toml", "task = \"x\"\n").unwrap_err();
    assert!(err.contains("missing field `agents`"), "{err}");
    assert!(!err.contains('\n'), "{err}");
    // The task may be left to `arbor run --task`.
    let spec = Spec::parse("s.toml", "[agents.root]\n[[agents.root.turns]]\n").unwrap();
    assert_eq!(spec.task, "");
}

#[test]
fn a_runs_kept_root_controls_apply_again_over_the_specs() {
    let text = "task = \"x\"\n[agents.root]\n[agents.root.controls]\ntemperature = 0.9\ntop_p = 0.5\n\
                [[agents.root.turns]]\ntext = \"hi\"\n";
    let definition = serde_json::json!({
        "path": "s.toml",
        "spec": text,
        "root_controls": {"temperature": 0.1, "seed": 7},
    });
    let spec = Spec::from_definition(&definition).unwrap().unwrap();
    let kept: arbor_model::Controls =
        serde_json::from_value(serde_json::json!({"temperature": 0.1, "top_p": 0.5, "seed": 7}))
            .unwrap();
    assert_eq!(spec.agents["root"].controls, kept);
    // Kept controls that no longer parse are an error, not dropped.
    let bad = serde_json::json!({"path": "s.toml", "spec": text, "root_controls": {"tempo": 1}});
    let e = Spec::from_definition(&bad).unwrap_err();
    assert!(e.contains("root_controls"), "{e}");
}
