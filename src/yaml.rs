//! Manifest files read the way `kubectl create -f` reads them, so that an offline verdict is
//! about the object kubectl would send.
//!
//! kubectl (cli-runtime `FileVisitor` + apimachinery `YAMLOrJSONDecoder`, sigs.k8s.io/yaml on
//! go-yaml v2):
//! - decodes the file through a byte-order-mark override: a UTF-8 BOM is dropped, a UTF-16
//!   BOM switches to UTF-16;
//! - reads a stream that starts with `{` as JSON objects one after the other, anything else
//!   as YAML;
//! - splits YAML into documents at lines that *start* with `---`; only spaces or a comment
//!   may follow on that line (anything else is an error), and a chunk is handed to the YAML
//!   parser on its own, so a broken document does not hide the ones after it;
//! - resolves anchors, aliases and merge keys (`<<: *base`, explicit keys win, earlier merge
//!   sources win over later ones), YAML 1.1 booleans (`yes`, `on`, …) and legacy octal
//!   (`0755`); a repeated key keeps its last value;
//! - skips documents that are empty, comments only, or `null`.
//!
//! The YAML parser is serde-saphyr: pure Rust, panic-free, with merge keys resolved by the
//! deserializer itself, input budgets, and no buffering of a document's events before they
//! are deserialized. `tests/yaml_parity.rs` compares the objects read here with kubectl's own
//! output.
//!
//! [`to_document`] writes the YAML this program generates for kubectl and helm (`policies/`,
//! the chart's CRD, the reconciler's golden files) with serde-saphyr's serializer, in a form
//! that go-yaml v2 (YAML 1.1) reads back as the same data.

use serde::de::DeserializeOwned;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    #[error("not text: {0}")]
    Encoding(String),
    #[error(
        "invalid YAML document separator {0:?}: only spaces or a comment may follow `---` on its line"
    )]
    Separator(String),
    #[error("{0}")]
    Yaml(String),
    #[error("not valid JSON: {0}")]
    Json(String),
}

/// The file's bytes as text, after kubectl's byte-order-mark handling. Invalid UTF-8 is an
/// error here (kubectl would substitute U+FFFD and carry on).
pub fn decode(bytes: Vec<u8>) -> Result<String, YamlError> {
    fn utf16(rest: &[u8], unit: fn([u8; 2]) -> u16) -> Result<String, YamlError> {
        if !rest.len().is_multiple_of(2) {
            return Err(YamlError::Encoding(
                "UTF-16 text with an odd number of bytes".to_string(),
            ));
        }
        let units = rest.chunks_exact(2).map(|c| unit([c[0], c[1]]));
        char::decode_utf16(units)
            .collect::<Result<String, _>>()
            .map_err(|e| YamlError::Encoding(format!("invalid UTF-16: {e}")))
    }
    match bytes.as_slice() {
        [0xEF, 0xBB, 0xBF, rest @ ..] => std::str::from_utf8(rest)
            .map(str::to_string)
            .map_err(|e| YamlError::Encoding(format!("invalid UTF-8: {e}"))),
        [0xFF, 0xFE, rest @ ..] => utf16(rest, u16::from_le_bytes),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, u16::from_be_bytes),
        _ => {
            String::from_utf8(bytes).map_err(|e| YamlError::Encoding(format!("invalid UTF-8: {e}")))
        }
    }
}

/// One YAML document of a file: its text and its 1-based number among the documents kubectl
/// would read (a separator at the very top does not start a document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub index: usize,
    pub text: &'a str,
}

/// Split YAML text into documents as kubectl's `YAMLReader` does. A bad separator line is an
/// error in the place of the document it would have ended; the next document still follows.
pub fn split_documents(text: &str) -> Vec<Result<Chunk<'_>, (usize, YamlError)>> {
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut pos = 0usize;
    let mut broken: Option<YamlError> = None;
    let mut index = 0usize;
    let mut close = |out: &mut Vec<_>, from: usize, to: usize, broken: &mut Option<YamlError>| {
        if to > from || broken.is_some() {
            index += 1;
            out.push(match broken.take() {
                Some(e) => Err((index, e)),
                None => Ok(Chunk {
                    index,
                    text: &text[from..to],
                }),
            });
        }
    };
    for line in text.split_inclusive('\n') {
        let line_start = pos;
        pos += line.len();
        if let Some(rest) = line.strip_prefix("---") {
            let rest = rest.trim();
            close(&mut out, start, line_start, &mut broken);
            start = pos;
            if !rest.is_empty() && !rest.starts_with('#') {
                broken = Some(YamlError::Separator(format!("--- {rest}")));
            }
        }
    }
    close(&mut out, start, pos, &mut broken);
    out
}

/// Deepest nesting of mappings and sequences accepted in one document.
pub const MAX_DEPTH: usize = 64;

/// Parser settings that read like go-yaml v2 behind kubectl, with budgets scaled to the
/// input: work stays linear in its size, and aliases cannot blow up (alias bombs).
pub fn options(input_len: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    // Every node costs at least a byte of text; aliases are limited separately below.
    budget.max_events = budget.max_events.max(input_len.saturating_mul(2));
    budget.max_nodes = budget.max_nodes.max(input_len);
    // Nesting costs stack in the parser and in the visitors (about 25 KiB a level in a
    // debug build): 64 levels fit a 2 MiB thread. The deepest schema in the Gateway API CRDs
    // nests about 30.
    budget.max_depth = MAX_DEPTH;
    serde_saphyr::options! {
        budget: Some(budget),
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins,
        merge_keys: serde_saphyr::MergeKeyPolicy::Merge,
        legacy_octal_numbers: true,
        strict_booleans: false,
        with_snippet: false,
    }
}

/// Deserialize one document (a [`Chunk`]'s text).
pub fn from_document<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, options(text.len()))
        .map_err(|e| YamlError::Yaml(one_line(&e.to_string())))
}

/// serde-saphyr may format an error over several lines; a verdict's message is one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A document as sigs.k8s.io/yaml turns it into JSON: like `serde_json::Value`, except that
/// mapping keys are resolved as scalars first and then written as text, so a plain `yes:` key
/// becomes `"true"`, `0x1F:` becomes `"31"`, and a `null` key is an error. (A quoted key stays
/// as written; keys that become equal keep the last value.)
struct KubeValue(Value);

impl<'de> serde::Deserialize<'de> for KubeValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KubeVisitor).map(KubeValue)
    }
}

struct KubeVisitor;

impl<'de> serde::de::Visitor<'de> for KubeVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity; kubectl fails on them too.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::String(String::from_utf8_lossy(v).into_owned()))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(KubeVisitor)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(KubeValue(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(KubeValue(key)) = map.next_key()? {
            let key = match key {
                Value::String(s) => s,
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                Value::Null => {
                    return Err(serde::de::Error::custom(
                        "a mapping key is null (kubectl refuses it too)",
                    ));
                }
                Value::Array(_) | Value::Object(_) => {
                    return Err(serde::de::Error::custom(
                        "a mapping key is a sequence or mapping; JSON keys are strings",
                    ));
                }
            };
            let KubeValue(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// One object as a YAML document (no `---` line), readable by humans and by YAML 1.1 readers
/// such as kubectl and helm: block style, no anchors; strings that YAML 1.1 would read as
/// something else (`on`, `yes`, `0755`, `1e3`, `2001-12-14`, …) quoted; multi-line strings as
/// literal blocks; single-line strings never folded, so a long CEL expression or message
/// stays on one line and greps as written.
pub fn to_document<T: serde::Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! {
        indent_step: 2,
        compact_list_indent: true,
        prefer_block_scalars: true,
        folded_wrap_chars: usize::MAX,
        yaml_12: false,
    };
    serde_saphyr::to_string_with_options(value, options)
}

/// One document of a manifest file, parsed.
#[derive(Debug)]
pub struct Document {
    /// 1-based document number in the file.
    pub index: usize,
    pub value: Result<Value, YamlError>,
}

/// Every document of a manifest file as kubectl reads it, empty documents left out.
pub fn read_documents(text: &str) -> Vec<Document> {
    if text.trim_start().starts_with('{') {
        let mut docs = Vec::new();
        let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        let mut ok = true;
        for (i, v) in stream.enumerate() {
            match v {
                Ok(v) => docs.push(Document {
                    index: i + 1,
                    value: Ok(v),
                }),
                Err(e) => {
                    // kubectl falls back to YAML while at most one JSON object was read.
                    if i <= 1 {
                        ok = false;
                        break;
                    }
                    docs.push(Document {
                        index: i + 1,
                        value: Err(YamlError::Json(e.to_string())),
                    });
                    break;
                }
            }
        }
        if ok {
            docs.retain(|d| !matches!(d.value, Ok(Value::Null)));
            return docs;
        }
    }
    split_documents(text)
        .into_iter()
        .filter_map(|chunk| match chunk {
            Err((index, e)) => Some(Document {
                index,
                value: Err(e),
            }),
            Ok(chunk) => match from_document::<KubeValue>(chunk.text) {
                Ok(KubeValue(Value::Null)) => None,
                value => Some(Document {
                    index: chunk.index,
                    value: value.map(|KubeValue(v)| v),
                }),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(text: &str) -> Vec<(usize, Result<Value, String>)> {
        read_documents(text)
            .into_iter()
            .map(|d| (d.index, d.value.map_err(|e| e.to_string())))
            .collect()
    }

    #[test]
    fn merge_keys_resolve_with_explicit_keys_winning() {
        let text = "base: &b\n  hostnames: [admin.example.org]\n  x: 1\nspec:\n  <<: *b\n  x: 2\n";
        let v = values(text);
        assert_eq!(
            v[0].1.as_ref().expect("parses")["spec"],
            json!({"hostnames": ["admin.example.org"], "x": 2})
        );
        // A list of merge sources: the earlier one wins.
        let text = "a: &a {k: a}\nb: &b {k: b, m: b}\nc:\n  <<: [*a, *b]\n";
        assert_eq!(
            values(text)[0].1.as_ref().expect("parses")["c"],
            json!({"k": "a", "m": "b"})
        );
    }

    #[test]
    fn byte_order_marks_are_read_like_kubectl() {
        let mut bytes = vec![0xEF, 0xBB, 0xBF];
        bytes.extend_from_slice(b"kind: A\n");
        assert_eq!(decode(bytes).expect("utf-8 bom"), "kind: A\n");
        let mut le = vec![0xFF, 0xFE];
        le.extend("kind: B\n".encode_utf16().flat_map(|u| u.to_le_bytes()));
        assert_eq!(decode(le).expect("utf-16le"), "kind: B\n");
        let mut be = vec![0xFE, 0xFF];
        be.extend("kind: C\n".encode_utf16().flat_map(|u| u.to_be_bytes()));
        assert_eq!(decode(be).expect("utf-16be"), "kind: C\n");
        assert!(decode(vec![0x6b, 0xff, 0x0a]).is_err(), "invalid UTF-8");
        assert!(decode(vec![0xFF, 0xFE, 0x41]).is_err(), "odd UTF-16");
    }

    #[test]
    fn documents_split_at_separator_lines_only() {
        let text = "---\na: 1\n--- # two\nb: 2\n---\n# only a comment\n---\n\nc: |\n  ---x\n---\r\nd: 4\r\n";
        let v = values(text);
        let got: Vec<(usize, Value)> = v
            .into_iter()
            .map(|(i, r)| (i, r.expect("parses")))
            .collect();
        // Document 3 is a comment only and is skipped, its number is not reused.
        assert_eq!(
            got,
            vec![
                (1, json!({"a": 1})),
                (2, json!({"b": 2})),
                (4, json!({"c": "---x\n"})),
                (5, json!({"d": 4})),
            ]
        );
    }

    #[test]
    fn a_broken_document_leaves_the_others_readable() {
        let text = "a: 1\n---\nb: [unclosed\n---\nc: 3\n--- garbage\nd: 4\n---\ne: 5\n";
        let v = values(text);
        assert_eq!(v.len(), 5, "{v:?}");
        assert_eq!(v[0], (1, Ok(json!({"a": 1}))));
        assert!(v[1].1.is_err(), "{v:?}");
        assert_eq!(v[2], (3, Ok(json!({"c": 3}))));
        let sep = v[3].1.as_ref().expect_err("bad separator");
        assert!(sep.contains("separator"), "{sep}");
        assert_eq!(v[4], (5, Ok(json!({"e": 5}))));
    }

    #[test]
    fn scalars_resolve_as_go_yaml_v2_does() {
        let text = "a: yes\nb: off\nc: 0755\nd: 1_000\ne: '0755'\nf: ~\ng: 2001-12-14\nh: 1.5\ni: k\nk: 1\nk: 2\n";
        let v = values(text)[0].1.clone().expect("parses");
        assert_eq!(
            v,
            json!({"a": true, "b": false, "c": 493, "d": 1000, "e": "0755", "f": null,
                   "g": "2001-12-14", "h": 1.5, "i": "k", "k": 2})
        );
        // Keys resolve like values, then become text; quoted keys stay as written.
        let v = values("yes: 1\n'no': 2\n0x1F: 3\non: 4\n")[0]
            .1
            .clone()
            .expect("parses");
        assert_eq!(v, json!({"true": 4, "no": 2, "31": 3}));
        assert!(values("~: 1\n")[0].1.is_err(), "null key");
    }

    #[test]
    fn json_streams_and_fallback() {
        let v = values("{\"a\": 1}\n{\"b\": 2}\n");
        assert_eq!(v, vec![(1, Ok(json!({"a": 1}))), (2, Ok(json!({"b": 2})))]);
        // Flow-style YAML that is not JSON falls back to the YAML reader.
        let v = values("{a: 1}\n");
        assert_eq!(v, vec![(1, Ok(json!({"a": 1})))]);
    }

    #[test]
    fn alias_bombs_and_depth_are_refused() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("b{}", i - 1)
            };
            bomb.push_str(&format!(
                "b{i}: &b{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        assert!(values(&bomb)[0].1.is_err(), "alias bomb must be refused");
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(values(&deep)[0].1.is_err(), "too deep");
    }

    /// No input panics the reader: every prefix of a sample with anchors, merges, flow and
    /// block styles, and every one-byte change of it among YAML's syntax characters.
    #[test]
    fn truncated_and_mutated_input_never_panics() {
        let sample = "---\nx: &a {k: [1, 'q', \"w\\n\"], <<: {m: 0755}}\ny:\n  <<: *a\n  z: |\n    text\n  l:\n  - ? key\n    : v\n  - !tag t\n--- # c\n{\"j\": [true, null]}\n";
        let bytes = sample.as_bytes();
        for end in 0..=bytes.len() {
            if let Ok(text) = std::str::from_utf8(&bytes[..end]) {
                let _ = read_documents(text);
            }
        }
        let specials = b"-:?[]{},&*!|>'\"%@`#\n\t <";
        for i in 0..bytes.len() {
            for &c in specials {
                let mut m = bytes.to_vec();
                m[i] = c;
                if let Ok(text) = std::str::from_utf8(&m) {
                    let _ = read_documents(text);
                }
            }
        }
    }

    /// Strings that a YAML 1.1 reader (kubectl's go-yaml v2) would take for something else,
    /// YAML syntax, long and multi-line text: written, then read the way kubectl reads them,
    /// each comes back as the same string, as a value and as a key.
    const TRICKY: &[&str] = &[
        "on",
        "off",
        "yes",
        "no",
        "y",
        "n",
        "Y",
        "NO",
        "True",
        "null",
        "Null",
        "~",
        "",
        "0755",
        "0o755",
        "0x1F",
        "0b101",
        "1e3",
        "1E-3",
        "1_000",
        "+1",
        ".5",
        "1:30",
        "190:20:30",
        "2001-12-14",
        "2001-12-14t21:59:43.10-05:00",
        ".inf",
        "-.Inf",
        ".nan",
        "=",
        "<<",
        "-",
        "- a",
        "? x",
        ": x",
        "a: b",
        "a:",
        "a #b",
        "a#b",
        "#a",
        "*a",
        "&a",
        "!a",
        "|",
        "> x",
        "@x",
        "`x",
        "%x",
        "'q'",
        "\"d\"",
        "a 'b' \"c\" \\d",
        "---",
        "--- x",
        "...",
        "trailing ",
        " leading",
        "tab\tin",
        "multi\nline",
        "multi\nline\n",
        "ends\n\n",
        "  indented first\nline",
        "\n",
        "crlf\r\n",
        "\u{feff}bom",
        "nel\u{85}",
        "é 字 😀",
        "has(object.spec) && has(object.spec.apex) ? object.spec.apex : '' + \"x\" + variables.apex.split('.').join(', ') + ' not allowed: ' + request.namespace",
        "a line longer than eighty characters, with no colon-space and no hash, so it could be folded by a writer",
    ];

    #[test]
    fn written_documents_read_back_as_written() {
        let scalars: Vec<Value> = TRICKY.iter().map(|s| json!(s)).collect();
        let keys: serde_json::Map<String, Value> =
            TRICKY.iter().map(|s| (s.to_string(), json!(1))).collect();
        let doc = json!({"values": scalars, "keys": keys, "n": [0, -1, 1.5, true, null]});
        let text = to_document(&doc).expect("serializes");
        let back = values(&text);
        assert_eq!(back.len(), 1, "{text}");
        assert_eq!(back[0].1.as_ref().expect("reads back"), &doc, "{text}");
        // A long single-line string stays on one line, as written.
        let long = TRICKY.last().expect("not empty");
        assert!(text.contains(&format!("\n- {long}\n")), "{text}");
    }
}
