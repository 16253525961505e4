//! Writing lines to stdout and stderr.
//!
//! `println!` panics when the reader of a pipe went away (`arbor run x | head -1`); these
//! helpers ignore write errors instead, so the process still ends with its own exit code.

use std::io::Write;

/// Writes `text` and a newline to stdout.
pub(crate) fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// How many lines of the live view (see [`crate::render::live`]) are on stderr now: anything else
/// written to stderr erases them first, so the view never draws over it.
static FRAME: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

fn frame() -> std::sync::MutexGuard<'static, usize> {
    FRAME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Erases the live view's lines (the caller holds the frame's lock).
fn erase(drawn: &mut usize, err: &mut impl Write) {
    if *drawn > 0 {
        let _ = write!(err, "\x1b[{}F\x1b[J", *drawn);
        *drawn = 0;
    }
}

/// Writes `text` and a newline to stderr (erasing the live view first; it is drawn again
/// below on its next tick).
pub(crate) fn err(text: &str) {
    let mut drawn = frame();
    let mut err = std::io::stderr().lock();
    erase(&mut drawn, &mut err);
    let _ = writeln!(err, "{text}");
}

/// Whether the live view's lines are on stderr now (not erased by another write).
pub(crate) fn frame_shown() -> bool {
    *frame() > 0
}

/// Replaces the live view's lines on stderr with `lines` (none: erased).
pub(crate) fn draw_frame(lines: &[String]) {
    let mut drawn = frame();
    let mut err = std::io::stderr().lock();
    let mut out = String::new();
    if *drawn > 0 {
        out.push_str(&format!("\x1b[{}F", *drawn));
    }
    out.push_str("\x1b[J");
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    let _ = err.write_all(out.as_bytes()).and_then(|()| err.flush());
    *drawn = lines.len();
}

/// Stderr for `tracing`: each write erases the live view first.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut drawn = frame();
        let mut err = std::io::stderr().lock();
        erase(&mut drawn, &mut err);
        err.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Stdout written piece by piece (buffered) for output too large to hold: a write that fails
/// (a closed pipe) is remembered, so the writer can stop producing.
#[derive(Debug)]
pub(crate) struct Stream {
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
    broken: bool,
}

impl Stream {
    /// Buffered stdout.
    pub(crate) fn stdout() -> Self {
        Self {
            out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock()),
            broken: false,
        }
    }

    /// Writes `text` as it is.
    pub(crate) fn write(&mut self, text: &str) {
        if !self.broken && self.out.write_all(text.as_bytes()).is_err() {
            self.broken = true;
        }
    }

    /// Whether a write failed: nobody reads any more.
    pub(crate) fn broken(&self) -> bool {
        self.broken
    }

    /// Writes what is buffered.
    pub(crate) fn flush(&mut self) {
        if !self.broken && self.out.flush().is_err() {
            self.broken = true;
        }
    }
}

/// `text` on one line: line breaks become spaces, surrounding space is trimmed.
pub(crate) fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` on one line with every control character but a tab (escape sequences included)
/// shown as `\u{…}`: a name a model or a repository chose cannot draw on the terminal.
pub(crate) fn inert(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// The first line of `text`, at most `max` characters (an ellipsis marks a cut).
pub(crate) fn short(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    match line.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None if text.trim().lines().count() > 1 => format!("{line}…"),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_and_short() {
        assert_eq!(one_line("a\n  b\r\n\nc "), "a b c");
        assert_eq!(short("hello world", 5), "hello…");
        assert_eq!(short("héllo", 10), "héllo");
        assert_eq!(short("first\nsecond", 10), "first…");
        assert_eq!(short("", 3), "");
    }
}
