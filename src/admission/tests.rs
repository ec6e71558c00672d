//! Codec and routing tests (SPEC §2.1, §2.5): decisions through `Admission::handle` exactly
//! as the server calls it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::cluster::{NamespaceSource, StaticNamespaces};
use crate::policy::{HOST_LABEL, Mode};

fn admission_with(cfg: PolicyConfig) -> Admission {
    let mut ns = StaticNamespaces::default();
    ns.insert(
        "tenant-alice",
        BTreeMap::from([(HOST_LABEL.to_string(), "alice.example.org".to_string())]),
    );
    ns.insert("tenant-nolabel", BTreeMap::new());
    Admission::new(
        Arc::new(cfg),
        NamespaceSource::Static(Arc::new(ns)),
        Metrics::new(),
    )
}

fn admission() -> Admission {
    admission_with(PolicyConfig {
        root_host: Some("example.org".into()),
        ..PolicyConfig::default()
    })
}

fn route_review(op: &str, ns: &str, hosts: &[&str]) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "uid-1",
            "kind": {"group": "gateway.networking.k8s.io", "version": "v1", "kind": "HTTPRoute"},
            "resource": {"group": "gateway.networking.k8s.io", "version": "v1", "resource": "httproutes"},
            "name": "web",
            "namespace": ns,
            "operation": op,
            "userInfo": {"username": "alice", "groups": ["tenant-alice-admins"]},
            "object": {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                       "metadata": {"name": "web", "namespace": ns},
                       "spec": {"hostnames": hosts}},
            "oldObject": null,
            "dryRun": true
        }
    })
}

async fn post(a: &Admission, target: WebhookResource, body: &Value) -> (u16, Value) {
    let reply = a
        .handle(Some(target), &serde_json::to_vec(body).expect("json"))
        .await;
    let v = serde_json::from_slice(&reply.body).expect("reply is JSON");
    (reply.status, v)
}

fn allowed(v: &Value) -> bool {
    v.pointer("/response/allowed") == Some(&json!(true))
}

fn message(v: &Value) -> String {
    v.pointer("/response/status/message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn allow_and_deny_echo_uid_with_forbidden_status() {
    let a = admission();
    let (status, v) = post(
        &a,
        WebhookResource::HttpRoutes,
        &route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], "uid-1");
    assert!(allowed(&v), "{v}");
    assert!(v["response"].get("status").is_none());

    let (status, v) = post(
        &a,
        WebhookResource::HttpRoutes,
        &route_review("CREATE", "tenant-alice", &["shop.bob.example.org"]),
    )
    .await;
    assert_eq!(status, 200);
    assert!(!allowed(&v));
    assert_eq!(v["response"]["uid"], "uid-1");
    assert_eq!(v["response"]["status"]["code"], 403);
    assert_eq!(v["response"]["status"]["reason"], "Forbidden");
    assert!(message(&v).contains("shop.bob.example.org"));
}

#[tokio::test]
async fn delete_connect_and_subresources_are_allowed() {
    let a = admission();
    for op in ["DELETE", "CONNECT"] {
        let (_, v) = post(
            &a,
            WebhookResource::HttpRoutes,
            &route_review(op, "tenant-alice", &["shop.bob.example.org"]),
        )
        .await;
        assert!(allowed(&v), "{op} must be allowed: {v}");
    }
    let mut r = route_review("UPDATE", "tenant-alice", &["shop.bob.example.org"]);
    r["request"]["subResource"] = json!("status");
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(allowed(&v), "status subresource must be allowed: {v}");
}

#[tokio::test]
async fn dry_run_is_evaluated_like_any_request() {
    let a = admission();
    let r = route_review("CREATE", "tenant-alice", &["shop.bob.example.org"]);
    assert_eq!(r["request"]["dryRun"], true);
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(!allowed(&v));
}

#[tokio::test]
async fn path_resource_mismatch_is_denied_naming_the_misconfiguration() {
    let a = admission();
    let (status, v) = post(
        &a,
        WebhookResource::Gateways,
        &route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]),
    )
    .await;
    assert_eq!(status, 200);
    assert!(!allowed(&v));
    let m = message(&v);
    assert!(
        m.contains("misconfiguration")
            && m.contains("/validate/gateways")
            && m.contains("httproutes"),
        "{m}"
    );
}

#[tokio::test]
async fn served_versions_are_accepted_unknown_ones_denied() {
    let a = admission();
    for version in ["v1", "v1beta1"] {
        let mut r = route_review("CREATE", "tenant-alice", &["shop.bob.example.org"]);
        r["request"]["resource"]["version"] = json!(version);
        let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
        assert!(
            message(&v).contains("hostnames must equal"),
            "{version}: {v}"
        );
    }
    let mut r = route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]);
    r["request"]["resource"]["version"] = json!("v9");
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(!allowed(&v), "unknown version must fail closed");
    for version in ["v1alpha2", "v1alpha3", "v1"] {
        let mut r = route_review("CREATE", "tenant-alice", &["api.bob.example.org"]);
        r["request"]["resource"] = json!({"group": "gateway.networking.k8s.io", "version": version, "resource": "tlsroutes"});
        r["request"]["kind"]["kind"] = json!("TLSRoute");
        let (_, v) = post(&a, WebhookResource::TlsRoutes, &r).await;
        assert!(
            !allowed(&v) && message(&v).starts_with("TLSRoute"),
            "{version}: {v}"
        );
    }
}

#[tokio::test]
async fn unusable_reviews_are_denied_with_200_and_the_uid_when_readable() {
    let a = admission();
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "",
            "request",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": route_review("CREATE", "tenant-alice", &[])["request"]}),
            "uid-1",
            "v1beta1",
        ),
        (
            json!({"kind": "AdmissionReview", "request": route_review("CREATE", "tenant-alice", &[])["request"]}),
            "uid-1",
            "apiVersion",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u2", "kind": {}, "resource": {}, "operation": 5}}),
            "u2",
            "AdmissionReview",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {}, "resource": {}, "operation": "CREATE"}}),
            "",
            "uid",
        ),
        (json!([1, 2, 3]), "", "AdmissionReview"),
        (json!("just a string"), "", "AdmissionReview"),
    ];
    for (body, uid, phrase) in cases {
        let (status, v) = post(&a, WebhookResource::HttpRoutes, &body).await;
        assert_eq!(status, 200, "{body}");
        assert!(!allowed(&v), "{body} must be denied: {v}");
        assert_eq!(v["response"]["uid"], uid, "{body}");
        assert!(message(&v).contains(phrase), "{body}: {}", message(&v));
    }
}

#[tokio::test]
async fn object_of_the_wrong_shape_is_denied_even_in_warn_mode() {
    let mut cfg = PolicyConfig {
        root_host: Some("example.org".into()),
        ..PolicyConfig::default()
    };
    cfg.enforcement.set(Layer::Route, Mode::Warn);
    let a = admission_with(cfg);
    let mut r = route_review("CREATE", "tenant-alice", &[]);
    r["request"]["object"]["spec"]["hostnames"] = json!("shop.bob.example.org");
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(!allowed(&v), "{v}");
    let mut r = route_review("CREATE", "tenant-alice", &[]);
    r["request"]["object"] = json!("not an object");
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(!allowed(&v), "{v}");
    let mut r = route_review("CREATE", "tenant-alice", &[]);
    r["request"]["object"] = Value::Null;
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(!allowed(&v), "{v}");
}

#[tokio::test]
async fn non_json_is_a_400_with_a_json_error() {
    let a = admission();
    // The last one is a usable review but for invalid UTF-8 in a field nobody reads.
    let mut junk = serde_json::to_vec(&route_review("CREATE", "tenant-alice", &[])).expect("json");
    junk.pop();
    junk.extend_from_slice(b",\"junk\":\"\xfe\xff\"}");
    for body in [
        &b"not json"[..],
        b"{\"apiVersion\":",
        b"",
        b"\xff\xfe",
        &junk,
    ] {
        let reply = a.handle(Some(WebhookResource::HttpRoutes), body).await;
        assert_eq!(reply.status, 400);
        let v: Value = serde_json::from_slice(&reply.body).expect("error body is JSON");
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains("not JSON")),
            "{v}"
        );
    }
}

#[tokio::test]
async fn enforcement_modes() {
    let deny_body = route_review("CREATE", "tenant-alice", &["shop.bob.example.org"]);
    for (mode, allowed_expected, decision) in [
        (Mode::Deny, false, "denied"),
        (Mode::Warn, true, "warned"),
        (Mode::Audit, true, "audited"),
        (Mode::Off, true, "allowed"),
    ] {
        let mut cfg = PolicyConfig {
            root_host: Some("example.org".into()),
            ..PolicyConfig::default()
        };
        cfg.enforcement.set(Layer::Route, mode);
        let a = admission_with(cfg);
        let (_, v) = post(&a, WebhookResource::HttpRoutes, &deny_body).await;
        assert_eq!(allowed(&v), allowed_expected, "{mode:?}: {v}");
        let warnings = v["response"]["warnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if mode == Mode::Warn {
            assert_eq!(warnings.len(), 1, "{v}");
            let w = warnings[0].as_str().unwrap_or_default();
            assert!(
                w.chars().count() <= MAX_WARNING_LEN && w.contains("shop.bob.example.org"),
                "{w}"
            );
        } else {
            assert!(warnings.is_empty(), "{mode:?}: {v}");
        }
        let text = a.metrics().render();
        let line = format!("decision=\"{decision}\"");
        assert!(
            text.lines()
                .any(|l| l.starts_with("tenant_gateway_admission_requests_total")
                    && l.contains(&line)
                    && l.contains("layer=\"route\"")),
            "{mode:?}: {text}"
        );
    }
}

#[tokio::test]
async fn missing_namespace_fails_closed_for_tenant_scope_only() {
    let a = admission();
    for ns in ["tenant-gone", "tenant-nolabel"] {
        let (_, v) = post(
            &a,
            WebhookResource::HttpRoutes,
            &route_review("CREATE", ns, &[]),
        )
        .await;
        assert!(!allowed(&v), "{ns}: {v}");
        assert!(message(&v).contains(crate::policy::HOST_LABEL), "{v}");
    }
    let (_, v) = post(
        &a,
        WebhookResource::HttpRoutes,
        &route_review("CREATE", "cozy-dashboard", &["dashboard.example.org"]),
    )
    .await;
    assert!(allowed(&v), "{v}");
}

#[test]
fn warnings_are_cut_on_char_boundaries() {
    let long = "é".repeat(300);
    let cut = truncate_warning(&long);
    assert_eq!(cut.chars().count(), MAX_WARNING_LEN);
    assert!(cut.ends_with('…'));
    assert_eq!(truncate_warning("short"), "short");
}

/// Nest `inner` in `depth` single-element arrays, as JSON text.
fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test]
async fn json_nested_too_deep_in_a_read_field_is_a_denial_naming_the_depth() {
    let a = admission();
    let review = route_review("CREATE", "tenant-alice", &["shop.alice.example.org"]);
    let text = serde_json::to_string(&review).expect("json");
    // spec.hostnames is read by the route layer: 300 levels there are refused with 200.
    let deep = text.replace(
        r#""hostnames":["shop.alice.example.org"]"#,
        &format!(r#""hostnames":{}"#, nested(300, r#""x""#)),
    );
    assert_ne!(deep, text);
    let reply = a
        .handle(Some(WebhookResource::HttpRoutes), deep.as_bytes())
        .await;
    assert_eq!(reply.status, 200, "valid JSON is never a 400");
    let v: Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!(v["response"]["uid"], "uid-1", "{v}");
    assert!(!allowed(&v));
    let m = message(&v);
    assert!(m.contains("304 levels deep") && m.contains("127"), "{m}");

    // The same nesting in a field no layer reads is skipped without a limit: decided as usual.
    let unread = text.replace(
        r#""spec":{"hostnames""#,
        &format!(r#""spec":{{"rules":{},"hostnames""#, nested(5000, "1")),
    );
    assert_ne!(unread, text);
    let reply = a
        .handle(Some(WebhookResource::HttpRoutes), unread.as_bytes())
        .await;
    let v: Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!(reply.status, 200);
    assert!(allowed(&v), "{v}");

    // Deep and broken is not JSON: 400.
    let broken = deep.replacen(']', "}", 1);
    let reply = a
        .handle(Some(WebhookResource::HttpRoutes), broken.as_bytes())
        .await;
    assert_eq!(reply.status, 400);
}

#[tokio::test]
async fn read_fields_larger_than_the_body_are_refused_without_building_them() {
    let a = admission();
    let mut review = route_review("CREATE", "tenant-alice", &[]);
    review["request"]["object"]["spec"]["hostnames"] = json!(vec!["a"; 100_000]);
    let (status, v) = post(&a, WebhookResource::HttpRoutes, &review).await;
    assert_eq!(status, 200);
    assert_eq!(v["response"]["uid"], "uid-1");
    assert!(!allowed(&v));
    assert!(message(&v).contains("more than the body's own size"), "{v}");
}
