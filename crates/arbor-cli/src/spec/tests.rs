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
         ask_human, read_file, write_file, list_dir, edit_file, run_command, diff_child, \
         merge_child, discard_child, mcp:SERVER/*, mcp:SERVER/TOOL)"
    );
    // The tools over coding children's work need a [workspace] and a coding child.
    let text = "task = \"x\"\n[agents.root]\ntools = [\"merge_child\"]\n[[agents.root.turns]]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert_eq!(
        err,
        "s.toml:2: agent \"root\": tool \"merge_child\" needs a [workspace] table and a child \
         with workspace = true (it works on coding children's worktrees)"
    );
    let text = "task = \"x\"\n[workspace]\nmerge_strategies = [\"rebase\"]\n[agents.root]\n\
                [[agents.root.turns]]\n";
    let err = Spec::parse("s.toml", text).unwrap_err();
    assert!(
        err.contains("[workspace] merge_strategies: strategy must be one of"),
        "{err}"
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

#[test]
fn pricing_prices_models_by_pattern_over_the_builtin_table() {
    let text = "task = \"x\"\n[pricing]\ncurrency = \"EUR\"\nmissing = \"error\"\n\
                [pricing.\"claude-sonnet-4*\"]\ninput = 2.0\noutput = 10.0\ncache_read = 0.2\n\
                [pricing.\"house-model\"]\ninput = 1.0\noutput = 2.0\n\
                [agents.root]\n[[agents.root.turns]]\n";
    let spec = Spec::parse("s.toml", text).unwrap();
    let table = spec.price_table().unwrap();
    assert_eq!(table.currency(), "EUR");
    let sonnet = table.price_of("claude-sonnet-4-5").unwrap();
    assert_eq!(
        (
            sonnet.input,
            sonnet.output,
            sonnet.cache_read,
            sonnet.cache_write
        ),
        (2_000_000, 10_000_000, 200_000, 2_000_000)
    );
    assert_eq!(table.price_of("house-model").unwrap().output, 2_000_000);
    // The built-in table is under it; the scripted agents' model is free.
    assert_eq!(table.price_of("gpt-4o").unwrap().input, 2_500_000);
    assert_eq!(
        table.price_of("scripted").unwrap(),
        arbor_core::pricing::Price::default()
    );
    let off = "task = \"x\"\n[pricing]\nbuiltin = false\n[agents.root]\n[[agents.root.turns]]\n";
    let spec = Spec::parse("s.toml", off).unwrap();
    assert!(spec.price_table().unwrap().price_of("gpt-4o").is_none());
}

#[test]
fn bad_pricing_is_refused_naming_the_key() {
    let tail = "[agents.root]\n[[agents.root.turns]]\n";
    for (pricing, wanted) in [
        (
            "[pricing]\nmissing = \"maybe\"\n",
            "pricing.missing must be \"error\", \"zero\" or \"warn\", not \"maybe\"",
        ),
        (
            "[pricing.\"m\"]\ninput = -1.0\noutput = 1.0\n",
            "s.toml:2: pricing.\"m\".input must be a price per million tokens from 0 to 999999, \
             not -1",
        ),
        (
            "[pricing.\"m\"]\ninput = 1.0\n",
            "pricing.\"m\": missing field `output`",
        ),
        (
            "[pricing.\"m\"]\ninput = 1.0\noutput = 1.0\ncahce_read = 1.0\n",
            "unknown field `cahce_read`",
        ),
        (
            "[pricing]\nbuiltin = \"yes\"\n",
            "pricing.builtin has the wrong type",
        ),
        (
            "[pricing]\ngpt = 3\n",
            "pricing.\"gpt\" must be a table of prices",
        ),
    ] {
        let text = format!("task = \"x\"\n{pricing}{tail}");
        let err = Spec::parse("s.toml", &text).unwrap_err();
        assert!(err.contains(wanted), "{err} does not say {wanted}");
        assert!(!err.contains('\n'), "{err}");
    }
}
