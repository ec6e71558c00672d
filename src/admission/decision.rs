//! The decision model and the review body (SPEC §2.1, §2.4): what a review decided
//! ([`Decision`]), how a layer's findings become one under its enforcement mode
//! ([`apply_mode_for`]), and the AdmissionReview or `{"error": ...}` answer written for it
//! ([`review_body`], [`Reply`]). Pure: no I/O, no metrics, no logs; the pipeline in
//! `admission/mod.rs` counts and logs what these return.

use serde::Serialize;
use serde_json::json;

use super::request::ADMISSION_API_VERSION;
use crate::policy::{self, Layer, Mode};
use crate::warning::MAX_WARNING_LEN;

/// HTTP-level outcome of one review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// JSON: an AdmissionReview (status 200) or `{"error": ...}` (status 400).
    pub body: Vec<u8>,
}

/// How a request was decided; the `decision` label of the request counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionKind {
    Allowed,
    Denied,
    Warned,
    Audited,
    /// Denied because the request could not be evaluated (bad shape, lookup failure, panic).
    Error,
}

impl DecisionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Allowed => "allowed",
            DecisionKind::Denied => "denied",
            DecisionKind::Warned => "warned",
            DecisionKind::Audited => "audited",
            DecisionKind::Error => "error",
        }
    }
}

/// The verdict for one request, before it is wrapped in an AdmissionReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub kind: DecisionKind,
    /// The layer that decided, when one did (`None` for envelope errors).
    pub layer: Option<Layer>,
    /// Denial message (or, for warn/audit, what would have been denied).
    pub message: Option<String>,
    pub warnings: Vec<String>,
}

impl Decision {
    pub(super) fn allow(layer: Option<Layer>) -> Decision {
        Decision {
            allowed: true,
            kind: DecisionKind::Allowed,
            layer,
            message: None,
            warnings: Vec::new(),
        }
    }

    pub(super) fn error(layer: Option<Layer>, message: String) -> Decision {
        Decision {
            allowed: false,
            kind: DecisionKind::Error,
            layer,
            message: Some(message),
            warnings: Vec::new(),
        }
    }
}

/// The warn-mode warning for one violation. The API server shows warnings cut at 120
/// characters, so what matters comes first: the apex the object was judged against, then the
/// problem without the object's name (kubectl prints warnings for the object it sent), so
/// the offending value stays inside the cut.
pub(crate) fn warn_mode_warning(layer: Layer, violation: &str, apex: Option<&str>) -> String {
    let problem = violation
        .split_once(": ")
        .filter(|(object, _)| !object.contains('"'))
        .map_or(violation, |(_, rest)| rest);
    let apex = apex.map(|a| format!(", apex {}", a.to_ascii_lowercase()));
    truncate_warning(&format!(
        "[{layer} warn{}] {problem}",
        apex.unwrap_or_default()
    ))
}

/// A layer's findings under its enforcement `mode`: denied, warned, audited or allowed. `apex`
/// is what the layer judged the object against, named in warn-mode warnings.
pub(crate) fn apply_mode_for(
    layer: Layer,
    mode: Mode,
    findings: policy::Findings,
    apex: Option<&str>,
) -> Decision {
    let mut warnings: Vec<String> = findings
        .warnings
        .iter()
        .map(|w| truncate_warning(w))
        .collect();
    if findings.violations.is_empty() {
        return Decision {
            allowed: true,
            kind: DecisionKind::Allowed,
            layer: Some(layer),
            message: None,
            warnings,
        };
    }
    let message = policy::combine_violations(&findings.violations);
    match mode {
        Mode::Deny => Decision {
            allowed: false,
            kind: DecisionKind::Denied,
            layer: Some(layer),
            message: Some(message),
            warnings,
        },
        Mode::Warn => {
            warnings.extend(
                findings
                    .violations
                    .iter()
                    .map(|v| warn_mode_warning(layer, v, apex)),
            );
            Decision {
                allowed: true,
                kind: DecisionKind::Warned,
                layer: Some(layer),
                message: Some(message),
                warnings,
            }
        }
        Mode::Audit => Decision {
            allowed: true,
            kind: DecisionKind::Audited,
            layer: Some(layer),
            message: Some(message),
            warnings,
        },
        Mode::Off => Decision::allow(Some(layer)),
    }
}

/// Cut `w` to at most [`MAX_WARNING_LEN`] characters (`crate::warning::clip`).
pub(crate) fn truncate_warning(w: &str) -> String {
    crate::warning::clip(w, MAX_WARNING_LEN)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct StatusOut<'a> {
    status: &'static str,
    code: u16,
    reason: &'static str,
    message: &'a str,
}

/// The serialized AdmissionReview response for `decision`: the same document as
/// the tests' `response_json`, written without building a tree (it is on every review's path).
pub fn review_body(uid: &str, d: &Decision) -> Vec<u8> {
    let out = ReviewOut {
        api_version: ADMISSION_API_VERSION,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid,
            allowed: d.allowed,
            status: (!d.allowed).then(|| StatusOut {
                status: "Failure",
                code: 403,
                reason: "Forbidden",
                message: d.message.as_deref().unwrap_or_default(),
            }),
            warnings: &d.warnings,
        },
    };
    // Sized for the whole answer (a warning's text is quoted, plus its escapes, rare), so
    // that an answer with warnings is not grown twice on the way.
    let warnings: usize = d.warnings.iter().map(|w| w.len() + 3).sum();
    let mut body = Vec::with_capacity(
        160 + uid.len() + d.message.as_ref().map_or(0, String::len) + warnings + 16,
    );
    // Serializing plain structs of strings, a bool and an integer into a Vec cannot fail
    // (serde_json errors only on I/O errors and on non-string map keys).
    if serde_json::to_writer(&mut body, &out).is_err() {
        body.clear();
    }
    body
}

pub(super) fn review_reply(uid: &str, d: &Decision) -> Reply {
    Reply {
        status: 200,
        body: review_body(uid, d),
    }
}

pub(super) fn bad_request(message: &str) -> Reply {
    Reply {
        status: 400,
        body: serde_json::to_vec(&json!({ "error": message })).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AdmissionReview response for `decision`, built as a JSON tree: the document
    /// [`review_body`] must write.
    fn response_json(uid: &str, d: &Decision) -> serde_json::Value {
        let mut response = json!({ "uid": uid, "allowed": d.allowed });
        if !d.allowed {
            response["status"] = json!({
                "status": "Failure",
                "code": 403,
                "reason": "Forbidden",
                "message": d.message.clone().unwrap_or_default(),
            });
        }
        if !d.warnings.is_empty() {
            response["warnings"] = json!(d.warnings);
        }
        json!({
            "apiVersion": ADMISSION_API_VERSION,
            "kind": "AdmissionReview",
            "response": response,
        })
    }

    #[test]
    fn warnings_are_cut_on_char_boundaries() {
        let long = "é".repeat(300);
        let cut = truncate_warning(&long);
        assert_eq!(cut.chars().count(), MAX_WARNING_LEN);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate_warning("short"), "short");
    }

    #[test]
    fn warn_mode_warnings_keep_value_and_apex_inside_the_cut() {
        let v = "HTTPRoute tenant-alice/a-rather-long-route-name-from-a-chart: hostname \"shop.bob.example.org\" is not allowed: hostnames must equal the namespace's namespace.cozystack.io/host label or be subdomains of it (alice.example.org)";
        let w = warn_mode_warning(Layer::Route, v, Some("Alice.Example.ORG"));
        assert!(w.chars().count() <= MAX_WARNING_LEN, "{w}");
        assert!(
            w.starts_with("[route warn, apex alice.example.org] hostname \"shop.bob.example.org\""),
            "{w}"
        );
        // Without an apex (a namespace without the label) the problem still comes first.
        let w = warn_mode_warning(
            Layer::Gateway,
            "Gateway a/b: namespace a has no label",
            None,
        );
        assert_eq!(w, "[gateway warn] namespace a has no label");
    }

    /// The directly written answer is the same document as the tree-built one, escapes included.
    #[test]
    fn review_body_equals_response_json() {
        let cases = [
            ("u-1", Decision::allow(Some(Layer::Route))),
            (
                "u-\"2\"\n",
                Decision::error(
                    None,
                    "a \"quoted\" <message>\twith\u{7} control".to_string(),
                ),
            ),
            (
                "",
                Decision {
                    allowed: true,
                    kind: DecisionKind::Warned,
                    layer: Some(Layer::Ingress),
                    message: Some("ignored when allowed".to_string()),
                    warnings: vec!["w1 é".to_string(), "w\\2".to_string()],
                },
            ),
            (
                "u-4",
                Decision {
                    allowed: false,
                    kind: DecisionKind::Denied,
                    layer: Some(Layer::Gateway),
                    message: None,
                    warnings: vec!["only a warning".to_string()],
                },
            ),
        ];
        for (uid, d) in &cases {
            let direct: serde_json::Value =
                serde_json::from_slice(&review_body(uid, d)).expect("valid JSON");
            assert_eq!(direct, response_json(uid, d), "uid {uid:?}");
        }
    }
}
