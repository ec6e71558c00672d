//! What the webhook router calls for each review: the real decision path ([`Admission`]) or a
//! stand-in with the same HTTP contract ([`AlwaysAllow`]) so benchmarks can measure the
//! TLS/HTTP stack alone on the identical code path.

use std::future::Future;

use bytes::Bytes;
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
/// work and not JSON parsing shortcuts: the whole body is checked as UTF-8 and read as JSON
/// (skipping, but validating, every field except `request.uid`, which it reads the way
/// [`Admission`] names a request it cannot decode: [`admission::review_uid_checked`]), and the
/// response is the same AdmissionReview built the same way as [`Admission`]'s. Non-JSON is
/// answered 400 and a review without a uid `allowed: false`, as [`Admission`] does, so it
/// never admits a body without a uid either.
#[derive(Debug, Default, Clone, Copy)]
pub struct AlwaysAllow;

impl AlwaysAllow {
    pub fn decide(body: &[u8]) -> Reply {
        match admission::review_uid_checked(body) {
            Err(e) => json_reply(
                400,
                &json!({ "error": format!("request body is not JSON: {e}") }),
            ),
            Ok(Some(uid)) => review(&uid, true, String::new()),
            Ok(None) => review(
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

    /// The baseline reads the uid the way the admission path names a request
    /// ([`admission::review_uid`]) and admits exactly the bodies where it finds one, on every
    /// body of the decoder's uid table too.
    #[test]
    fn always_allow_names_the_uid_the_admission_path_reads() {
        for (sent, uid) in [
            (&br#"{"request":{"uid":"u-1"}}"#[..], "u-1"),
            (
                br#"{"kind":{"uid":"x"},"request":{"uid":"a\nb","operation":"CREATE"}}"#,
                "a\nb",
            ),
            (
                br#"{"request":{"object":{"uid":"inner"},"uid":"u-2"}}"#,
                "u-2",
            ),
            (br#"{"request":7,"request":{"uid":"u-3"}}"#, "u-3"),
            (br#"{"request":{"uid":"a"},"request":{"uid":"u-4"}}"#, "u-4"),
            (br#"{"request":["u-5"]}"#, ""),
            (br#"[{"request":{"uid":"u-6"}}]"#, ""),
        ] {
            let r = AlwaysAllow::decide(sent);
            assert_eq!(r.status, 200);
            assert_eq!(body(&r)["response"]["uid"], uid);
            assert_eq!(body(&r)["response"]["allowed"], !uid.is_empty());
            assert_eq!(admission::review_uid(sent).as_deref().unwrap_or(""), uid);
        }
        for (case, sent, uid) in admission::testing::uid_cases() {
            let r = AlwaysAllow::decide(sent.as_bytes());
            assert_eq!(r.status, 200, "{case}");
            assert_eq!(body(&r)["response"]["uid"], uid.as_str(), "{case}");
            assert_eq!(body(&r)["response"]["allowed"], !uid.is_empty(), "{case}");
        }
        let r = AlwaysAllow::decide(b"{\"request\":{\"uid\":\"u\"},\"x\":\"\xff\"}");
        assert_eq!(r.status, 400, "not UTF-8 is not JSON");
        let r = AlwaysAllow::decide(br#"{"request":{"uid":"u"}} {}"#);
        assert_eq!(r.status, 400, "one JSON value");
    }
}
