//! What the webhook router calls for each review: the real decision path ([`Admission`]) or a
//! stand-in with the same HTTP contract ([`AlwaysAllow`]) so benchmarks can measure the
//! TLS/HTTP stack alone on the identical code path.

use std::borrow::Cow;
use std::future::Future;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::admission::{self, Admission, Decision, DecisionKind, Reply, WebhookResource};

/// Decides one review posted to `/validate/<target>`.
///
/// The router has already enforced the method, the path and the body limit; `body` is the
/// complete request body. The reply's status and body are sent as they are, with
/// `Content-Type: application/json`. A panic inside `handle` is caught by the router and
/// becomes a denial, but implementations should not rely on that.
pub trait ReviewHandler: Send + Sync + 'static {
    fn handle(&self, target: WebhookResource, body: Bytes) -> impl Future<Output = Reply> + Send;
}

impl ReviewHandler for Admission {
    async fn handle(&self, target: WebhookResource, body: Bytes) -> Reply {
        Admission::handle(self, Some(target), &body).await
    }
}

/// Allows every well-formed review without looking at the object: the benchmark baseline.
///
/// It still does the minimum any real handler must do, so the comparison measures policy
/// work and not JSON parsing shortcuts: the whole body is scanned as JSON (typed
/// deserialisation that skips, but validates, every field except `request.uid`), and the
/// response is the same AdmissionReview built the same way as [`Admission`]'s. Non-JSON is
/// answered 400 and a review without a uid `allowed: false`, as [`Admission`] does, so it
/// never blindly admits a malformed request either.
#[derive(Debug, Default, Clone, Copy)]
pub struct AlwaysAllow;

#[derive(Deserialize)]
struct UidOnly<'a> {
    #[serde(borrow, default)]
    request: Option<UidRequest<'a>>,
}

#[derive(Deserialize)]
struct UidRequest<'a> {
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
}

impl AlwaysAllow {
    pub fn decide(body: &[u8]) -> Reply {
        let parsed: UidOnly<'_> = match serde_json::from_slice(body) {
            Ok(p) => p,
            Err(e) if e.is_syntax() || e.is_eof() || e.is_io() => {
                return json_reply(
                    400,
                    &json!({ "error": format!("request body is not JSON: {e}") }),
                );
            }
            Err(e) => {
                return review("", false, format!("not a usable AdmissionReview: {e}"));
            }
        };
        match parsed.request.and_then(|r| r.uid) {
            Some(uid) if !uid.is_empty() => review(&uid, true, String::new()),
            _ => review(
                "",
                false,
                "not a usable AdmissionReview: request.uid is missing".to_string(),
            ),
        }
    }
}

impl ReviewHandler for AlwaysAllow {
    fn handle(&self, _target: WebhookResource, body: Bytes) -> impl Future<Output = Reply> + Send {
        std::future::ready(AlwaysAllow::decide(&body))
    }
}

fn review(uid: &str, allowed: bool, message: String) -> Reply {
    let decision = Decision {
        allowed,
        kind: if allowed {
            DecisionKind::Allowed
        } else {
            DecisionKind::Error
        },
        layer: None,
        message: (!message.is_empty()).then_some(message),
        warnings: Vec::new(),
    };
    Reply {
        status: 200,
        body: admission::review_body(uid, &decision),
    }
}

pub(crate) fn json_reply(status: u16, value: &serde_json::Value) -> Reply {
    Reply {
        status,
        // Serialising a `Value` only fails for non-string map keys, which `json!` cannot build.
        body: serde_json::to_vec(value).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn body(r: &Reply) -> Value {
        serde_json::from_slice(&r.body).expect("json")
    }

    #[test]
    fn always_allow_echoes_uid() {
        let r = AlwaysAllow::decide(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","object":{"a":[1,2,{"b":null}]}}}"#,
        );
        assert_eq!(r.status, 200);
        let v = body(&r);
        assert_eq!(v["response"]["uid"], "u-1");
        assert_eq!(v["response"]["allowed"], true);
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    }

    #[test]
    fn always_allow_handles_escaped_uid_and_bad_input() {
        let r = AlwaysAllow::decide(br#"{"request":{"uid":"a\"b"}}"#);
        assert_eq!(body(&r)["response"]["uid"], "a\"b");

        let r = AlwaysAllow::decide(b"not json");
        assert_eq!(r.status, 400);
        assert!(body(&r)["error"].is_string());
        let r = AlwaysAllow::decide(br#"{"request":{"uid":"x""#);
        assert_eq!(r.status, 400, "truncated JSON is not JSON");

        for missing in [
            &br#"{}"#[..],
            br#"{"request":{}}"#,
            br#"{"request":{"uid":""}}"#,
        ] {
            let r = AlwaysAllow::decide(missing);
            assert_eq!(r.status, 200);
            assert_eq!(body(&r)["response"]["allowed"], false);
        }
        let r = AlwaysAllow::decide(br#"{"request":{"uid":5}}"#);
        assert_eq!(r.status, 200);
        assert_eq!(body(&r)["response"]["allowed"], false);
        let r = AlwaysAllow::decide(br#"[1,2]"#);
        assert_eq!(body(&r)["response"]["allowed"], false);
    }

    /// The baseline's own typed decode names a review it allows by the uid the admission
    /// path reads ([`admission::review_uid`]); it differs only where that decode refuses a
    /// body (answered with no uid) or takes a request written as an array.
    #[test]
    fn always_allow_names_the_uid_the_admission_path_reads() {
        for allowed in [
            &br#"{"request":{"uid":"u-1"}}"#[..],
            br#"{"kind":{"uid":"x"},"request":{"uid":"a\nb","operation":"CREATE"}}"#,
            br#"{"request":{"object":{"uid":"inner"},"uid":"u-2"}}"#,
        ] {
            let r = AlwaysAllow::decide(allowed);
            assert_eq!(body(&r)["response"]["allowed"], true);
            assert_eq!(
                body(&r)["response"]["uid"].as_str(),
                admission::review_uid(allowed).as_deref()
            );
        }
        for (refused, read) in [
            (&br#"{"request":7,"request":{"uid":"u-3"}}"#[..], "u-3"),
            (br#"{"request":{"uid":"a"},"request":{"uid":"u-4"}}"#, "u-4"),
        ] {
            let r = AlwaysAllow::decide(refused);
            assert_eq!(body(&r)["response"]["allowed"], false);
            assert_eq!(body(&r)["response"]["uid"], "");
            assert_eq!(admission::review_uid(refused).as_deref(), Some(read));
        }
        let positional = br#"{"request":["u-5"]}"#;
        assert_eq!(
            body(&AlwaysAllow::decide(positional))["response"]["uid"],
            "u-5"
        );
        assert_eq!(admission::review_uid(positional), None);
    }
}
