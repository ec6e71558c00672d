//! Is a body JSON at all, and how deep does it nest? Asked only after the typed decode of a
//! review failed, to choose between 400 ("not JSON") and 200 + a denial (SPEC §2.1), without
//! building a tree of the body (SPEC §9) and without a depth limit: serde_json stops at 128
//! levels, and valid JSON nested deeper is "too deep", not "not JSON".
//!
//! A loop over the bytes with one bit per open level (object or array), so memory is an
//! eighth of the nesting depth and the stack does not grow.

/// Nesting serde_json decodes into values (its default recursion limit); skipped values
/// (`IgnoredAny`) have no limit, so this applies to the fields tenant-gateway reads.
pub const DECODER_DEPTH_LIMIT: usize = 127;

/// A syntactically valid JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Deepest nesting of objects and arrays (a scalar alone is 0, `[]` is 1).
    pub max_depth: usize,
}

/// Where and why the body is not JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {offset}")]
pub struct NotJson {
    pub offset: usize,
    pub what: &'static str,
}

/// Open levels: one bit each, 1 = object.
#[derive(Default)]
struct Levels {
    bits: Vec<u64>,
    len: usize,
}

impl Levels {
    fn push(&mut self, object: bool) {
        let (word, bit) = (self.len / 64, self.len % 64);
        if word == self.bits.len() {
            self.bits.push(0);
        }
        if object {
            self.bits[word] |= 1 << bit;
        } else {
            self.bits[word] &= !(1 << bit);
        }
        self.len += 1;
    }

    fn pop(&mut self) {
        self.len -= 1;
    }

    /// The innermost level is an object; `None` at top level.
    fn top(&self) -> Option<bool> {
        let i = self.len.checked_sub(1)?;
        Some(self.bits[i / 64] & (1 << (i % 64)) != 0)
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn err(&self, what: &'static str) -> NotJson {
        NotJson {
            offset: self.i,
            what,
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, c: u8, what: &'static str) -> Result<(), NotJson> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    fn string(&mut self) -> Result<(), NotJson> {
        self.expect(b'"', "expected a string")?;
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            self.i += 1;
                            for _ in 0..4 {
                                if !self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                                    return Err(self.err("invalid \\u escape"));
                                }
                                self.i += 1;
                            }
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(c) if c < 0x20 => return Err(self.err("control character in string")),
                Some(_) => self.i += 1,
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<(), NotJson> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), NotJson> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// An object key and its colon.
    fn key(&mut self) -> Result<(), NotJson> {
        self.ws();
        self.string()?;
        self.ws();
        self.expect(b':', "expected ':'")
    }
}

/// Check that `body` is one JSON text (RFC 8259) and measure its nesting.
pub fn scan(body: &[u8]) -> Result<Shape, NotJson> {
    let mut s = Scanner { b: body, i: 0 };
    let mut levels = Levels::default();
    let mut max_depth = 0;
    'value: loop {
        // A value is expected here.
        s.ws();
        match s.peek() {
            Some(b'{') => {
                s.i += 1;
                levels.push(true);
                max_depth = max_depth.max(levels.len);
                s.ws();
                if s.peek() == Some(b'}') {
                    s.i += 1;
                    levels.pop();
                } else {
                    s.key()?;
                    continue 'value;
                }
            }
            Some(b'[') => {
                s.i += 1;
                levels.push(false);
                max_depth = max_depth.max(levels.len);
                s.ws();
                if s.peek() == Some(b']') {
                    s.i += 1;
                    levels.pop();
                } else {
                    continue 'value;
                }
            }
            Some(b'"') => s.string()?,
            Some(b'-' | b'0'..=b'9') => s.number()?,
            Some(b't') => s.literal(b"true")?,
            Some(b'f') => s.literal(b"false")?,
            Some(b'n') => s.literal(b"null")?,
            None => return Err(s.err("expected a value, found the end")),
            Some(_) => return Err(s.err("expected a value")),
        }
        // A value ended: close levels until one continues with a comma.
        loop {
            s.ws();
            match levels.top() {
                None => {
                    return if s.i == body.len() {
                        Ok(Shape { max_depth })
                    } else {
                        Err(s.err("trailing characters"))
                    };
                }
                Some(object) => match s.peek() {
                    Some(b',') => {
                        s.i += 1;
                        if object {
                            s.key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if object => {
                        s.i += 1;
                        levels.pop();
                    }
                    Some(b']') if !object => {
                        s.i += 1;
                        levels.pop();
                    }
                    _ => {
                        return Err(s.err(if object {
                            "expected ',' or '}'"
                        } else {
                            "expected ',' or ']'"
                        }));
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;

    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<IgnoredAny>(text).is_ok()
    }

    #[test]
    fn agrees_with_serde_json_on_shallow_texts() {
        let cases = [
            "{}",
            "[]",
            " 0 ",
            "-0.5e+10",
            "\"a\\u00e9\\n\"",
            r#"{"a": [1, true, null, {"b": "c"}], "d": {}}"#,
            "[1,]",
            "{,}",
            r#"{"a" 1}"#,
            r#"{"a": 1,}"#,
            "[1 2]",
            "01",
            "1.",
            "1e",
            "-",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\\u12\"",
            "\"a\u{1}\"",
            "[",
            "]",
            "{\"a\":1}}",
            "[1] [2]",
            "",
            "  ",
            "{\"a\":[{\"b\":[]}]}",
            "[{]}",
            "{\"a\":]",
            "\u{feff}{}",
            "1 x",
        ];
        for c in cases {
            assert_eq!(scan(c.as_bytes()).is_ok(), serde_accepts(c), "{c:?}");
        }
    }

    /// Mutated JSON texts (deterministic): the scan agrees with serde_json's validation,
    /// which skips values without a depth limit as the scan does.
    #[test]
    fn agrees_with_serde_json_on_mutated_texts() {
        let seeds = [
            r#"{"apiVersion":"admission.k8s.io/v1","request":{"uid":"a\u00e9","object":{"spec":{"hostnames":["a.b",1.5e-3,-0,true,null]}}}}"#,
            r#"[[],{},[{"a":[]}],"\n\"",0.25,-12E+2]"#,
        ];
        let alphabet = b"{}[]:,\"\\ \n\t0123456789.eE+-tfnrulasxu";
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut checked = 0;
        for seed in seeds {
            for _ in 0..5000 {
                let mut b = seed.as_bytes().to_vec();
                for _ in 0..(1 + next() % 3) {
                    let i = (next() as usize) % b.len();
                    let c = alphabet[(next() as usize) % alphabet.len()];
                    match next() % 3 {
                        0 => b[i] = c,
                        1 => b.insert(i, c),
                        _ => {
                            b.remove(i);
                        }
                    }
                    if b.is_empty() {
                        b.push(b'0');
                    }
                }
                let Ok(text) = std::str::from_utf8(&b) else {
                    continue;
                };
                assert_eq!(scan(&b).is_ok(), serde_accepts(text), "{text}");
                checked += 1;
            }
        }
        assert!(checked > 9000);
    }

    #[test]
    fn measures_depth_beyond_the_decoder_limit_without_recursion() {
        assert_eq!(scan(b"1").map(|s| s.max_depth), Ok(0));
        assert_eq!(scan(b"[[], {\"a\": [{}]}]").map(|s| s.max_depth), Ok(4));
        let at = DECODER_DEPTH_LIMIT;
        let decodes = |t: &str| serde_json::from_str::<serde_json::Value>(t).is_ok();
        let ok = format!("{}{}", "[".repeat(at), "]".repeat(at));
        assert!(decodes(&ok), "serde_json decodes {at} levels into values");
        assert_eq!(scan(ok.as_bytes()).map(|s| s.max_depth), Ok(at));
        let deep = format!("{}{}", "[".repeat(at + 1), "]".repeat(at + 1));
        assert!(!decodes(&deep), "and not one more");
        assert!(
            serde_accepts(&deep),
            "skipping has no limit: only read fields have"
        );
        assert_eq!(scan(deep.as_bytes()).map(|s| s.max_depth), Ok(at + 1));
        // A million levels of objects: no stack overflow, exact depth.
        let n = 1_000_000;
        let mut huge = "{\"a\":".repeat(n);
        huge.push('1');
        huge.push_str(&"}".repeat(n));
        assert_eq!(scan(huge.as_bytes()).map(|s| s.max_depth), Ok(n));
        // Deep but broken is still not JSON.
        let broken = format!("{}{}", "[".repeat(500), "]".repeat(499));
        assert!(scan(broken.as_bytes()).is_err());
        let mismatched = format!("{}}}{}", "[".repeat(300), "]".repeat(299));
        assert!(scan(mismatched.as_bytes()).is_err());
    }
}
