//! Log fields that come from a request (uid, kind, name, namespace, user, messages quoting
//! hostnames) are written through [`Escaped`], so a client cannot forge a log line or a
//! field (SPEC §9: "logs never let a request forge a line").
//!
//! Text format: backslash, double quote, control characters (newline, carriage return,
//! ESC for terminal sequences, C1), Unicode line/paragraph separators and bidirectional
//! overrides are written as escapes, and a value holding a space or `=` is quoted so it
//! cannot pose as a second `key=value`. JSON format: the JSON encoder already escapes
//! everything, so values are written unchanged (escaping twice would only garble them).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

static JSON_FORMAT: AtomicBool = AtomicBool::new(false);

/// Called by the logging setup when the JSON format is chosen.
pub fn set_json_format(json: bool) {
    JSON_FORMAT.store(json, Ordering::Relaxed);
}

/// A request-derived string, escaped for the text log format when displayed.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

/// Characters that must never appear raw in a text log line.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\\' | '"')
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Write `s` escaped for the text format.
pub fn write_escaped(s: &str, f: &mut impl fmt::Write) -> fmt::Result {
    let quote = s.contains([' ', '=']);
    if quote {
        f.write_char('"')?;
    }
    let mut rest = s;
    while let Some(i) = rest.find(needs_escape) {
        f.write_str(&rest[..i])?;
        // `find` returned the start of a char, so there is one at `i`.
        let c = rest[i..].chars().next().unwrap_or_default();
        match c {
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\\' => f.write_str("\\\\")?,
            '"' => f.write_str("\\\"")?,
            c => write!(f, "\\u{{{:x}}}", u32::from(c))?,
        }
        rest = &rest[i + c.len_utf8()..];
    }
    f.write_str(rest)?;
    if quote {
        f.write_char('"')?;
    }
    Ok(())
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if JSON_FORMAT.load(Ordering::Relaxed) {
            return f.write_str(self.0);
        }
        write_escaped(self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &str) -> String {
        let mut out = String::new();
        write_escaped(s, &mut out).expect("write");
        out
    }

    #[test]
    fn request_fields_cannot_break_a_line_or_pose_as_fields() {
        let cases = [
            ("web", "web"),
            ("tenant-alice/web", "tenant-alice/web"),
            ("", ""),
            (
                "x\n2026-01-01T00:00:00Z  INFO admission allowed uid=y",
                "\"x\\n2026-01-01T00:00:00Z  INFO admission allowed uid=y\"",
            ),
            ("a\r\nb", "a\\r\\nb"),
            ("tab\there", "tab\\there"),
            ("esc\u{1b}[31mred", "esc\\u{1b}[31mred"),
            ("c1\u{85}next", "c1\\u{85}next"),
            ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"),
            ("bidi\u{202e}txt", "bidi\\u{202e}txt"),
            ("quote\"back\\slash", "quote\\\"back\\\\slash"),
            ("x layer=gateway", "\"x layer=gateway\""),
            ("ünïcödé.example", "ünïcödé.example"),
        ];
        for (input, want) in cases {
            let got = esc(input);
            assert!(
                !got.contains(['\n', '\r', '\u{1b}', '\u{85}', '\u{2028}']),
                "{got:?}"
            );
            assert_eq!(got, want, "{input:?}");
        }
    }

    #[test]
    fn display_is_escaped_in_text_format() {
        // The default format is text; the JSON switch is process-wide and left alone here.
        let shown = format!("{}", Escaped("a\nb"));
        assert_eq!(shown, "a\\nb");
    }
}
