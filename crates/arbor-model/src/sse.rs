//! A server-sent events decoder: bytes in, events out, in any chunking.
//!
//! It handles LF, CRLF and CR line ends, `:` comments, multi-line `data:` fields and the
//! `event:` field; it keeps at most [`MAX_EVENT_BYTES`] of one event (a server that never
//! ends a line cannot grow memory without bound), and [`SseDecoder::finish`] says whether
//! the stream stopped in the middle of an event.

/// Bytes one event (or one line) may take.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (empty when absent).
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Why decoding stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// An event or a line grew past [`MAX_EVENT_BYTES`].
    TooLarge,
    /// The stream ended inside an event.
    Truncated,
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge => write!(f, "an event exceeds {MAX_EVENT_BYTES} bytes"),
            Self::Truncated => f.write_str("the stream ended in the middle of an event"),
        }
    }
}

/// The decoder's state between chunks.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The last byte was a CR (a following LF belongs to the same line end).
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    size: usize,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `chunk`, returning the events it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(e) = self.line_done(&line)? {
                        out.push(e);
                    }
                }
                _ => {
                    if self.line.len() >= MAX_EVENT_BYTES {
                        return Err(SseError::TooLarge);
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(out)
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            self.size = 0;
            if !self.has_data {
                self.event.clear();
                return Ok(None);
            }
            self.has_data = false;
            self.size = 0;
            return Ok(Some(SseEvent {
                event: std::mem::take(&mut self.event),
                data: std::mem::take(&mut self.data),
            }));
        }
        if line[0] == b':' {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        self.size += line.len();
        if self.size > MAX_EVENT_BYTES {
            return Err(SseError::TooLarge);
        }
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = value.to_owned(),
            _ => {}
        }
        Ok(None)
    }

    /// Ends the stream: the events a final line completes (a last event with no blank line
    /// after it is delivered), or `Truncated` when a line was cut.
    pub fn finish(&mut self) -> Result<Vec<SseEvent>, SseError> {
        if !self.line.is_empty() {
            return Err(SseError::Truncated);
        }
        if self.has_data {
            self.has_data = false;
            return Ok(vec![SseEvent {
                event: std::mem::take(&mut self.event),
                data: std::mem::take(&mut self.data),
            }]);
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.push(c)?);
        }
        out.extend(d.finish()?);
        Ok(out)
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_come_out_whatever_the_chunking_and_line_ends() {
        let text = "event: a\r\ndata: one\r\ndata:two\r\n\r\n: comment\n\ndata: {\"x\":1}\r\rdata: last\n\n";
        let want = vec![ev("a", "one\ntwo"), ev("", "{\"x\":1}"), ev("", "last")];
        assert_eq!(all(&[text.as_bytes()]).unwrap(), want);
        for split in 0..text.len() {
            let (a, b) = text.as_bytes().split_at(split);
            assert_eq!(all(&[a, b]).unwrap(), want, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(all(&bytes).unwrap(), want);
    }

    #[test]
    fn a_cut_line_is_truncation_and_a_huge_one_is_refused() {
        assert_eq!(all(&[b"data: {\"par"]), Err(SseError::Truncated));
        // A complete last line without the blank line still counts.
        assert_eq!(all(&[b"data: done\n"]).unwrap(), vec![ev("", "done")]);
        let mut d = SseDecoder::new();
        let huge = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(d.push(&huge), Err(SseError::TooLarge));
    }
}
