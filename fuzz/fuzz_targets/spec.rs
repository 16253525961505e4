//! The CLI's TOML spec parser (`arbor_cli::check_spec`, what `arbor run` does before it
//! opens a store) on arbitrary text: it returns an error or a spec, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = arbor_cli::check_spec("fuzz.toml", &text) {
        assert!(e.starts_with("fuzz.toml"), "{e}");
        assert!(!e.contains('\n'), "errors are one line: {e:?}");
    }
});
