//! Helpers shared by the layers: lenient JSON access that still reports wrong types, and the
//! message pieces several layers must word identically.

use serde_json::{Map, Value};

use super::{HOST_LABEL, NamespaceContext, PolicyConfig, Review, ShapeError, object_ref};

/// Values quoted in messages are cut to this many bytes: an object may be megabytes, a denial
/// message must stay readable.
const MAX_QUOTED: usize = 256;

/// How a JSON type is named in a ShapeError ("must be a list, got a string").
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

pub(super) fn shape_error(
    review: &Review<'_>,
    field: String,
    expected: &str,
    got: &Value,
) -> ShapeError {
    ShapeError {
        kind: review.kind.to_string(),
        object: object_ref(review),
        field,
        problem: format!("must be {expected}, got {}", type_name(got)),
    }
}

/// `key` of `map`, with `null` read as absent (Kubernetes clients send both for "unset").
pub(super) fn get<'a>(map: Option<&'a Map<String, Value>>, key: &str) -> Option<&'a Value> {
    map?.get(key).filter(|v| !v.is_null())
}

/// `v` as an object; `None` when absent or null. The path is only built on error.
pub(super) fn as_object<'a>(
    review: &Review<'_>,
    v: Option<&'a Value>,
    path: impl FnOnce() -> String,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(shape_error(review, path(), "an object", other)),
    }
}

/// `v` as a list; `None` when absent or null.
pub(super) fn as_array<'a>(
    review: &Review<'_>,
    v: Option<&'a Value>,
    path: impl FnOnce() -> String,
) -> Result<Option<&'a [Value]>, ShapeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a.as_slice())),
        Some(other) => Err(shape_error(review, path(), "a list", other)),
    }
}

/// `v` as a string; `None` when absent or null.
pub(super) fn as_str<'a>(
    review: &Review<'_>,
    v: Option<&'a Value>,
    path: impl FnOnce() -> String,
) -> Result<Option<&'a str>, ShapeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(shape_error(review, path(), "a string", other)),
    }
}

/// The request's object as a map. A null object reads as empty; the codec never passes one on
/// CREATE/UPDATE, but an empty object is the safe reading for the layers (nothing published).
pub(super) fn root<'a>(
    review: &Review<'_>,
    v: &'a Value,
    name: &str,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    as_object(review, Some(v), || name.to_string())
}

/// `root` for layers that read both sides of an UPDATE: `prefix` is `""` for the new object
/// and `"oldObject."` for the old one, and names the side in shape errors.
pub(super) fn side_root<'a>(
    review: &Review<'_>,
    v: &'a Value,
    prefix: &str,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    root(
        review,
        v,
        if prefix.is_empty() {
            "object"
        } else {
            "oldObject"
        },
    )
}

/// Most violations listed for one object. Every problem is listed up to this count; beyond it
/// a hostile or broken object (say 100,000 bad Ingress hosts) would turn a 3 MiB request into a
/// response of tens of megabytes, which helps nobody.
pub(super) const MAX_VIOLATIONS: usize = 64;

/// Violations of one object, in the order found, capped at [`MAX_VIOLATIONS`] with a final
/// line saying how many were left out. Messages are built only when they will be kept.
#[derive(Default)]
pub(super) struct Violations {
    list: Vec<String>,
    omitted: usize,
}

impl Violations {
    pub(super) fn push(&mut self, message: impl FnOnce() -> String) {
        if self.list.len() < MAX_VIOLATIONS {
            self.list.push(message());
        } else {
            self.omitted += 1;
        }
    }

    pub(super) fn finish(mut self, review: &Review<'_>) -> Vec<String> {
        if self.omitted > 0 {
            self.list.push(format!(
                "{} {}: {} more problems of the kinds above were not listed; fix those and \
                 retry to see the rest",
                review.kind,
                object_ref(review),
                self.omitted
            ));
        }
        self.list
    }
}

/// `s` in double quotes with escapes, cut to a readable length. The budget counts the
/// escaped text: control characters escape to up to 10 bytes each, and a message must stay
/// bounded whatever the input.
pub(super) fn quoted(s: &str) -> String {
    let escaped = format!("{s:?}");
    if escaped.len() <= MAX_QUOTED + 2 {
        return escaped;
    }
    let mut end = MAX_QUOTED + 1;
    while !escaped.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\"... ({} bytes in all)", &escaped[..end], s.len())
}

/// Shortens `s` to at most `max` characters (the one warning clipper, `crate::warning`).
pub(super) fn clip(s: &str, max: usize) -> String {
    crate::warning::clip(s, max)
}

/// The fail-closed denial of layers 2, 7 and 8 when the namespace has no apex. `what` names
/// the hostnames the layer would have checked, e.g. "Gateway listener hostnames".
pub(super) fn missing_apex(review: &Review<'_>, ns: &NamespaceContext, what: &str) -> String {
    format!(
        "{} {}: {}",
        review.kind,
        object_ref(review),
        missing_apex_why(review, ns, what)
    )
}

/// [`missing_apex`] without the object in front, for a layer that words its own head.
pub(super) fn missing_apex_why(review: &Review<'_>, ns: &NamespaceContext, what: &str) -> String {
    let namespace = review.namespace;
    let why = match ns {
        NamespaceContext::NotFound => {
            format!("namespace {namespace} was not found, so it has no {HOST_LABEL} label")
        }
        NamespaceContext::Found { labels } => match labels.get(HOST_LABEL) {
            Some(v) if v.is_empty() => {
                format!("namespace {namespace} has no {HOST_LABEL} label (it is set to \"\")")
            }
            _ => format!("namespace {namespace} has no {HOST_LABEL} label"),
        },
    };
    format!(
        "{why}; {what} in tenant namespaces are judged against the apex that label names, so \
         the request is denied (fail closed) until it is set. If the namespace is being \
         created, retry in a few seconds."
    )
}

/// "groups: a, b" for messages about trusted callers.
pub(super) fn trusted_groups(cfg: &PolicyConfig) -> String {
    if cfg.trusted_groups.is_empty() {
        "no trusted groups are configured".to_string()
    } else {
        format!("groups: {}", cfg.trusted_groups.join(", "))
    }
}

/// Why `s` is not a valid namespace name (a DNS-1123 label), or `None` when it is.
pub(super) fn namespace_name_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("it is empty".to_string());
    }
    if s.len() > crate::hostname::MAX_LABEL_LEN {
        return Some(format!(
            "it is {} characters long; a namespace name may be at most {}",
            s.len(),
            crate::hostname::MAX_LABEL_LEN
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Some(format!(
            "it contains {c:?}; a namespace name may only contain lowercase letters a-z, digits \
             0-9 and \"-\""
        ));
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Some("it must start and end with a letter or digit".to_string());
    }
    None
}

#[cfg(test)]
pub(super) mod testing {
    //! Builders for layer tests.

    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::super::{HOST_LABEL, NamespaceContext, Operation, PolicyConfig, Review};

    /// A CREATE of `object` by an untrusted user without groups.
    pub fn review<'a>(kind: &'a str, namespace: &'a str, object: &'a Value) -> Review<'a> {
        Review {
            operation: Operation::Create,
            kind,
            namespace,
            name: "web",
            object,
            old_object: None,
            username: "alice",
            groups: &[],
        }
    }

    pub fn ns_apex(apex: &str) -> NamespaceContext {
        ns_labels(&[(HOST_LABEL, apex)])
    }

    pub fn ns_labels(labels: &[(&str, &str)]) -> NamespaceContext {
        NamespaceContext::Found {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    /// The three forms of a missing apex (SPEC §2.2).
    pub fn missing_apexes() -> Vec<(&'static str, NamespaceContext)> {
        vec![
            ("namespace not found", NamespaceContext::NotFound),
            ("no host label", ns_labels(&[("other", "x")])),
            ("empty host label", ns_apex("")),
        ]
    }

    pub fn cfg() -> PolicyConfig {
        PolicyConfig {
            root_host: Some("example.org".to_string()),
            ..PolicyConfig::default()
        }
    }

    pub fn groups(g: &[&str]) -> Vec<std::borrow::Cow<'static, str>> {
        g.iter().map(|s| s.to_string().into()).collect()
    }

    /// Asserts every phrase occurs in `message`.
    #[track_caller]
    pub fn assert_mentions(message: &str, phrases: &[&str]) {
        for p in phrases {
            assert!(message.contains(p), "{message:?} lacks {p:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoted_values_stay_bounded_after_escaping() {
        let controls: String = std::iter::repeat_n('\u{1}', 1000).collect();
        let q = super::quoted(&controls);
        assert!(q.len() < 400, "{} bytes", q.len());
        assert!(q.starts_with('"') && q.contains("1000 bytes in all"), "{q}");
        assert_eq!(super::quoted("short"), "\"short\"");
        let long = "é".repeat(400);
        assert!(super::quoted(&long).len() < 400);
    }

    use serde_json::json;

    use super::*;

    #[test]
    fn quoting_bounds_length_on_char_boundaries() {
        assert_eq!(quoted("a.b"), "\"a.b\"");
        let long = "\u{430}".repeat(1000);
        let q = quoted(&long);
        assert!(q.len() < 400, "{q}");
        assert!(q.contains("2000 bytes"));
        assert_eq!(clip("short", 120), "short");
        let c = clip(&"\u{430}".repeat(200), 120);
        assert!(c.chars().count() == 120 && c.ends_with('…'));
    }

    #[test]
    fn namespace_names() {
        for ok in ["a", "cozy-system", "default", "a1", &"a".repeat(63)] {
            assert_eq!(namespace_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a.b",
            "a_b",
            "a b",
            "\u{430}",
            &"a".repeat(64),
        ] {
            assert!(namespace_name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn type_names() {
        assert_eq!(type_name(&json!(null)), "null");
        assert_eq!(type_name(&json!(1)), "a number");
        assert_eq!(type_name(&json!("s")), "a string");
        assert_eq!(type_name(&json!([])), "a list");
        assert_eq!(type_name(&json!({})), "an object");
        assert_eq!(type_name(&json!(true)), "a boolean");
    }

    #[test]
    fn violations_are_capped_with_a_summary() {
        let obj = json!({});
        let r = testing::review("HTTPRoute", "tenant-alice", &obj);
        let mut v = Violations::default();
        for i in 0..1000 {
            v.push(|| format!("problem {i}"));
        }
        let list = v.finish(&r);
        assert_eq!(list.len(), MAX_VIOLATIONS + 1);
        assert_eq!(list[0], "problem 0");
        assert!(list[MAX_VIOLATIONS].contains(&format!("{} more", 1000 - MAX_VIOLATIONS)));
        assert!(list[MAX_VIOLATIONS].contains("HTTPRoute tenant-alice/web"));
        let v = Violations::default();
        assert!(v.finish(&r).is_empty());
    }

    /// `leaf` placed at `path`; numeric segments become single-element lists.
    fn nest(path: &[&str], leaf: Value) -> Value {
        match path.split_first() {
            None => leaf,
            Some((seg, rest)) if seg.parse::<usize>().is_ok() => {
                Value::Array(vec![nest(rest, leaf)])
            }
            Some((seg, rest)) => {
                let mut m = Map::new();
                m.insert((*seg).to_string(), nest(rest, leaf));
                Value::Object(m)
            }
        }
    }

    /// Every layer, fed odd values at every field it reads (and at their parents), must return
    /// without panicking, and whatever it returns must respect the message limits.
    #[test]
    fn odd_inputs_never_panic() {
        use super::super::{DEFAULT_TRUSTED_GROUPS, Layer, NamespaceContext, evaluate};

        let mut deep = json!("x");
        for _ in 0..100 {
            deep = json!([{ "a": deep }]);
        }
        let leaves = vec![
            json!(null),
            json!(true),
            json!(0),
            json!(-1.5e300),
            json!(""),
            json!("*"),
            json!("tenant-root"),
            json!("a.example.org"),
            json!("\u{430}.example.org"),
            json!("x".repeat(100_000)),
            json!(".".repeat(1000)),
            json!([]),
            json!({}),
            json!([null]),
            json!([1, "a"]),
            json!(["*.example.org", "", "tenant-x", "Shop.example.org"]),
            json!({"host": 1, "hosts": [1]}),
            deep,
        ];
        let paths: &[&[&str]] = &[
            &[],
            &["spec"],
            &["spec", "listeners"],
            &["spec", "listeners", "0"],
            &["spec", "listeners", "0", "hostname"],
            &["spec", "listeners", "0", "name"],
            &["spec", "hostnames"],
            &["spec", "hostnames", "0"],
            &["spec", "rules"],
            &["spec", "rules", "0"],
            &["spec", "rules", "0", "host"],
            &["spec", "tls"],
            &["spec", "tls", "0"],
            &["spec", "tls", "0", "hosts"],
            &["spec", "tls", "0", "hosts", "0"],
            &["spec", "defaultBackend"],
            &["spec", "host"],
            &["metadata"],
            &["metadata", "labels"],
            &["metadata", "labels", HOST_LABEL],
            &["metadata", "annotations"],
            &[
                "metadata",
                "annotations",
                super::super::ingress::SERVER_ALIAS,
            ],
            &[
                "metadata",
                "annotations",
                super::super::ingress::SERVER_SNIPPET,
            ],
            &["spec", "components"],
            &["spec", "components", "platform", "values"],
            &[
                "spec",
                "components",
                "platform",
                "values",
                "gateway",
                "attachedNamespaces",
            ],
            &[
                "spec",
                "components",
                "platform",
                "values",
                "gateway",
                "attachedNamespaces",
                "0",
            ],
        ];
        let contexts = [
            NamespaceContext::NotFound,
            testing::ns_apex(""),
            testing::ns_apex("alice.example.org"),
            testing::ns_apex("Example.ORG"),
            testing::ns_apex(&"a".repeat(300)),
        ];
        let configs = [
            testing::cfg(),
            PolicyConfig::default(),
            PolicyConfig {
                tenant_prefix: String::new(),
                root_host: Some(String::new()),
                trusted_groups: Vec::new(),
                ..PolicyConfig::default()
            },
        ];
        let trusted = testing::groups(&[DEFAULT_TRUSTED_GROUPS[0]]);
        for path in paths {
            for leaf in &leaves {
                let obj = nest(path, leaf.clone());
                for layer in Layer::ALL {
                    for ns in &contexts {
                        for cfg in &configs {
                            for old in [None, Some(&obj)] {
                                for groups in [&[][..], &trusted[..]] {
                                    let r = Review {
                                        old_object: old,
                                        groups,
                                        ..testing::review("Kind", "tenant-alice", &obj)
                                    };
                                    match evaluate(layer, &r, ns, cfg) {
                                        Ok(f) => {
                                            assert!(f.violations.len() <= MAX_VIOLATIONS + 1);
                                            for v in &f.violations {
                                                assert!(v.len() < 4096, "{layer}: {v}");
                                            }
                                            for w in &f.warnings {
                                                assert!(w.len() <= 120, "{layer}: {w}");
                                            }
                                        }
                                        Err(e) => assert!(!e.field.is_empty()),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
