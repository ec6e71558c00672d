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

/// `s` in double quotes with escapes, cut to a readable length.
pub(super) fn quoted(s: &str) -> String {
    if s.len() <= MAX_QUOTED {
        return format!("{s:?}");
    }
    let mut end = MAX_QUOTED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes in all)", &s[..end], s.len())
}

/// Shortens `s` to at most `max` bytes, marking the cut with "...". Used for warnings, which
/// the API server relays only up to a fixed length.
pub(super) fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The fail-closed denial of layers 2, 7 and 8 when the namespace has no apex. `what` names
/// the hostnames the layer would have checked, e.g. "Gateway listener hostnames".
pub(super) fn missing_apex(review: &Review<'_>, ns: &NamespaceContext, what: &str) -> String {
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
        "{} {}: {why}; {what} in tenant namespaces are only admitted within that apex, so the \
         request is denied until the label is set. If the namespace is being created, retry in \
         a few seconds.",
        review.kind,
        object_ref(review),
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

    pub fn groups(g: &[&str]) -> Vec<String> {
        g.iter().map(|s| s.to_string()).collect()
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
        let c = clip(&"\u{430}".repeat(100), 120);
        assert!(c.len() <= 120 && c.ends_with("..."));
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
}
