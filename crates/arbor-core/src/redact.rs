//! Redaction: secrets are replaced before text leaves the runtime.
//!
//! A [`Redactor`] replaces secrets in text. An agent with a redactor has it applied to every
//! event its sessions publish and every transcript entry they store (the run itself keeps the
//! original text, so the model's view does not change); a supervisor applies its redactor to
//! everything it emits and forces it onto every child agent. Structured values are redacted
//! string by string ([`redact_value`]), so a secret containing characters JSON escapes is
//! still found, and the structure is never broken.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Replaces secrets in text. Must be cheap and never fail.
pub trait Redactor: fmt::Debug + Send + Sync {
    /// `text` with every secret replaced.
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str>;
}

/// A shared redactor.
impl<T: Redactor + ?Sized> Redactor for std::sync::Arc<T> {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        (**self).redact(text)
    }
}

/// Replaces each exact secret string, and each match of its patterns, with `[REDACTED]`.
#[derive(Debug, Clone, Default)]
pub struct SecretRedactor {
    secrets: Vec<String>,
    patterns: Vec<regex_lite::Regex>,
}

impl SecretRedactor {
    /// A redactor for these secrets (empty strings are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
        // Longest first, so a secret that contains another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Self {
            secrets,
            patterns: Vec::new(),
        }
    }

    /// Also replaces every match of each pattern (regular expressions in the syntax of the
    /// `regex` crate, without Unicode classes: `regex-lite`). A pattern that does not
    /// compile, or that matches the empty string (it would redact between every
    /// character), is refused with an error naming it.
    pub fn with_patterns<I, S>(mut self, patterns: I) -> crate::CoreResult<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for p in patterns {
            let p = p.as_ref();
            let re = regex_lite::Regex::new(p).map_err(|e| {
                crate::CoreError::Validation(format!("redaction pattern {p:?} is invalid: {e}"))
            })?;
            if re.is_match("") {
                return Err(crate::CoreError::Validation(format!(
                    "redaction pattern {p:?} matches the empty string"
                )));
            }
            self.patterns.push(re);
        }
        Ok(self)
    }

    /// Whether it redacts nothing.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.patterns.is_empty()
    }
}

/// The text secrets are replaced with.
pub const REDACTED: &str = "[REDACTED]";

impl Redactor for SecretRedactor {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        for re in &self.patterns {
            if re.is_match(&out) {
                out = Cow::Owned(re.replace_all(&out, REDACTED).into_owned());
            }
        }
        out
    }
}

/// Redacts every string (and object key) inside `value`; returns whether anything changed.
pub fn redact_value(redactor: &dyn Redactor, value: &mut Value) -> bool {
    match value {
        Value::String(s) => match redactor.redact(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *s = clean;
                true
            }
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| redact_value(redactor, v) | changed),
        Value::Object(map) => {
            let dirty_keys: Vec<String> = map
                .keys()
                .filter(|k| matches!(redactor.redact(k), Cow::Owned(_)))
                .cloned()
                .collect();
            let mut changed = !dirty_keys.is_empty();
            for key in dirty_keys {
                if let Some(v) = map.remove(&key) {
                    map.insert(redactor.redact(&key).into_owned(), v);
                }
            }
            for v in map.values_mut() {
                changed |= redact_value(redactor, v);
            }
            changed
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `item` with its strings redacted, or `None` when it holds no secret. A value that does not
/// survive the round trip through JSON is reported as `Err` with the serde message, so the
/// caller can drop it rather than pass a secret on.
///
/// One pass: the item is written as JSON with each string (object keys included) unescaped,
/// shown to the redactor and written back redacted; only when one changed is the text read
/// back into a new item. No `serde_json::Value` is built on the way.
pub(crate) fn redact_serde<T>(redactor: &dyn Redactor, item: &T) -> Result<Option<T>, String>
where
    T: Serialize + DeserializeOwned,
{
    redact_serde_sized(redactor, item).map(|(clean, _)| clean)
}

/// [`redact_serde`], and the size in bytes of the redacted item's compact JSON (what
/// `serde_json::to_vec` of the result would give), measured on the way.
pub(crate) fn redact_serde_sized<T>(
    redactor: &dyn Redactor,
    item: &T,
) -> Result<(Option<T>, usize), String>
where
    T: Serialize + DeserializeOwned,
{
    let dirty = std::cell::Cell::new(false);
    let rewrite = Rewrite {
        redactor,
        text: String::new(),
        escaped: false,
        dirty: &dirty,
    };
    let mut json = Vec::with_capacity(256);
    let mut serializer = serde_json::Serializer::with_formatter(&mut json, rewrite);
    item.serialize(&mut serializer).map_err(|e| e.to_string())?;
    if !dirty.get() {
        return Ok((None, json.len()));
    }
    serde_json::from_slice(&json)
        .map(|clean| (Some(clean), json.len()))
        .map_err(|e| e.to_string())
}

/// A compact JSON formatter that writes each string, unescaped, through a redactor.
struct Rewrite<'a> {
    redactor: &'a dyn Redactor,
    /// The string being written, unescaped.
    text: String,
    /// Whether the string being written had a character JSON escapes.
    escaped: bool,
    dirty: &'a std::cell::Cell<bool>,
}

impl serde_json::ser::Formatter for Rewrite<'_> {
    fn begin_string<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.text.clear();
        self.escaped = false;
        Ok(())
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        _: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        self.text.push_str(fragment);
        Ok(())
    }

    fn write_char_escape<W: ?Sized + std::io::Write>(
        &mut self,
        _: &mut W,
        escape: serde_json::ser::CharEscape,
    ) -> std::io::Result<()> {
        use serde_json::ser::CharEscape;
        self.escaped = true;
        self.text.push(match escape {
            CharEscape::Quote => '"',
            CharEscape::ReverseSolidus => '\\',
            CharEscape::Solidus => '/',
            CharEscape::Backspace => '\u{8}',
            CharEscape::FormFeed => '\u{c}',
            CharEscape::LineFeed => '\n',
            CharEscape::CarriageReturn => '\r',
            CharEscape::Tab => '\t',
            CharEscape::AsciiControl(byte) => char::from(byte),
        });
        Ok(())
    }

    fn end_string<W: ?Sized + std::io::Write>(&mut self, out: &mut W) -> std::io::Result<()> {
        match self.redactor.redact(&self.text) {
            // Unchanged, and nothing in it that JSON escapes: written back as it came, with
            // no second escaping pass (most strings of most items).
            Cow::Borrowed(text) if !self.escaped => {
                out.write_all(b"\"")?;
                out.write_all(text.as_bytes())?;
                out.write_all(b"\"")
            }
            clean => {
                if matches!(clean, Cow::Owned(_)) {
                    self.dirty.set(true);
                }
                serde_json::to_writer(out, clean.as_ref()).map_err(std::io::Error::other)
            }
        }
    }
}

#[cfg(test)]
mod pattern_tests {
    use super::*;

    fn clean_copy() -> serde_json::Value {
        serde_json::json!({"a": ["x\"y", {"b": "\u{7}"}], "n": -3})
    }

    #[test]
    fn the_scan_finds_secrets_that_json_escapes_anchored_patterns_and_keys() {
        let quoted = "pa\"ss\\wo\nrd\u{1}";
        let r = SecretRedactor::new([quoted])
            .with_patterns([r"^whole-field$"])
            .unwrap();
        // Nothing to redact: no copy.
        let clean = serde_json::json!({"a": ["x", {"b": "y"}], "n": 3});
        assert_eq!(redact_serde(&r, &clean).unwrap(), None);
        // A secret with a quote, a backslash, a newline and a control character.
        let item = serde_json::json!({"args": {"text": format!("use {quoted} now")}});
        let out = redact_serde(&r, &item).unwrap().unwrap();
        assert_eq!(out["args"]["text"], "use [REDACTED] now");
        // A pattern anchored to a whole string.
        let item = serde_json::json!(["keep", "whole-field"]);
        assert_eq!(
            redact_serde(&r, &item).unwrap().unwrap(),
            serde_json::json!(["keep", "[REDACTED]"])
        );
        // The size measured on the way is the redacted item's compact JSON.
        let item = serde_json::json!({"t": format!("a\t{quoted}"), "n": [1, 2.5, null, true]});
        let (clean, size) = redact_serde_sized(&r, &item).unwrap();
        assert_eq!(size, serde_json::to_vec(&clean.unwrap()).unwrap().len());
        let (none, size) = redact_serde_sized(&r, &clean_copy()).unwrap();
        assert_eq!(
            (none, size),
            (None, serde_json::to_vec(&clean_copy()).unwrap().len())
        );
        // Beside a redacted string, unchanged ones (escaped or plain) come back as they were,
        // and the size is still the redacted item's compact JSON.
        let item = serde_json::json!({"e": "x\"y\n", "p": "plain", "s": format!("{quoted}!")});
        let expected = serde_json::json!({"e": "x\"y\n", "p": "plain", "s": "[REDACTED]!"});
        let (out, size) = redact_serde_sized(&r, &item).unwrap();
        assert_eq!(out.unwrap(), expected);
        assert_eq!(size, serde_json::to_vec(&expected).unwrap().len());
        // An object key.
        let item = serde_json::json!({ quoted: 1 });
        assert_eq!(
            redact_serde(&r, &item).unwrap().unwrap(),
            serde_json::json!({"[REDACTED]": 1})
        );
    }

    #[test]
    fn patterns_redact_every_match_and_bad_patterns_are_named() {
        let r = SecretRedactor::new(["hunter2"])
            .with_patterns([r"sk-[A-Za-z0-9]{8,}"])
            .unwrap();
        assert_eq!(
            r.redact("key sk-abcdefgh12 and sk-ZZZZZZZZZ, pw hunter2, not sk-short"),
            "key [REDACTED] and [REDACTED], pw [REDACTED], not sk-short"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        let e = SecretRedactor::default().with_patterns(["("]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("redaction pattern \"(\" is invalid"),
            "{e}"
        );
        let e = SecretRedactor::default().with_patterns(["a*"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "redaction pattern \"a*\" matches the empty string"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_redacted_string_by_string() {
        let r = SecretRedactor::new(["se\"cret"]);
        let mut v = serde_json::json!({
            "a": "x se\"cret y",
            "list": [1, "se\"cret", {"se\"cret": true}],
            "clean": "nothing here",
        });
        assert!(redact_value(&r, &mut v));
        assert_eq!(
            v,
            serde_json::json!({
                "a": "x [REDACTED] y",
                "list": [1, "[REDACTED]", {"[REDACTED]": true}],
                "clean": "nothing here",
            })
        );
        let mut clean = serde_json::json!({"k": ["v"]});
        assert!(!redact_value(&r, &mut clean));
    }

    #[test]
    fn replaces_every_occurrence_and_borrows_when_clean() {
        let r = SecretRedactor::new(["canary", "canary-long", ""]);
        assert_eq!(
            r.redact("a canary and canary-long"),
            "a [REDACTED] and [REDACTED]"
        );
        assert!(matches!(r.redact("clean"), Cow::Borrowed(_)));
    }
}
