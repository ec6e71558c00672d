//! Codec and routing tests (SPEC §2.1, §2.5): decisions through `Admission::handle` exactly
//! as the server calls it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::testing::{self, nested, review, route_review, uid_cases};
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
    ns.insert(
        "tenant-cust",
        BTreeMap::from([(HOST_LABEL.to_string(), "Customer1.io".to_string())]),
    );
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

/// mallory's UPDATE of `target` at `version` and `sub` with both sides given, in the new
/// object's namespace.
fn review_of(
    target: WebhookResource,
    version: &str,
    sub: &str,
    user_groups: &[&str],
    old: Value,
    new: Value,
) -> testing::Review {
    let r = review(target).version(version);
    let r = match new["metadata"]["namespace"].as_str() {
        Some(ns) => r.namespace(ns),
        None => r,
    };
    r.uid("uid-sub")
        .sub_resource(sub)
        .operation("UPDATE")
        .user("mallory", user_groups)
        .object(new)
        .old_object(old)
}

#[tokio::test]
async fn namespace_status_and_finalize_are_judged_like_updates() {
    let a = admission();
    let ns = |host: &str| {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "tenant-alice", "labels": {HOST_LABEL: host}},
               "spec": {"finalizers": []}})
    };
    for sub in ["status", "finalize"] {
        // (groups, new host label, allowed)
        for (groups, host, ok) in [
            (&["tenant-alice-admins"][..], "example.org", false),
            (&["tenant-alice-admins"][..], "alice.example.org", true),
            (&["system:masters"][..], "example.org", true),
        ] {
            let r = review_of(
                WebhookResource::Namespaces,
                "v1",
                sub,
                groups,
                ns("alice.example.org"),
                ns(host),
            )
            .build();
            let (_, v) = post(&a, WebhookResource::Namespaces, &r).await;
            assert_eq!(allowed(&v), ok, "{sub} {groups:?} {host}: {v}");
            if !ok {
                assert!(message(&v).contains("is immutable once set"), "{v}");
            }
        }
    }
}

#[tokio::test]
async fn subresources_are_trusted_only_where_the_api_server_resets_read_fields() {
    let a = admission();
    // CRD status writes reset spec and metadata: admitted unchecked.
    let mut r = route_review("UPDATE", "tenant-alice", &["shop.bob.example.org"]);
    r["request"]["subResource"] = json!("status");
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(allowed(&v), "httproutes/status: {v}");
    // A subresource we know nothing about is judged like an UPDATE.
    r["request"]["subResource"] = json!("scale");
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(!allowed(&v), "httproutes/scale: {v}");

    // ingresses/status keeps annotations: judged, but only when a read field changes.
    let ing = |alias: &str, hosts: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
               "metadata": {"name": "web", "namespace": "tenant-alice",
                            "annotations": {crate::policy::ingress::SERVER_ALIAS: alias}},
               "spec": {"rules": [{"host": hosts}]},
               "status": {"loadBalancer": {}}})
    };
    let groups = &["tenant-alice-admins"][..];
    let cases = [
        // (old, new, allowed)
        (
            ing("", "a.alice.example.org"),
            ing("dashboard.example.org", "a.alice.example.org"),
            false,
        ),
        (
            ing("", "a.alice.example.org"),
            ing("b.alice.example.org", "a.alice.example.org"),
            true,
        ),
        // An Ingress admitted before the webhook: a status write that changes nothing read
        // passes (the ingress controller is not blocked).
        (
            ing("dashboard.example.org", "x.bob.example.org"),
            ing("dashboard.example.org", "x.bob.example.org"),
            true,
        ),
    ];
    for (old, new, ok) in cases {
        let r = review_of(
            WebhookResource::Ingresses,
            "v1",
            "status",
            groups,
            old.clone(),
            new.clone(),
        )
        .build();
        let (_, v) = post(&a, WebhookResource::Ingresses, &r).await;
        assert_eq!(allowed(&v), ok, "{old} -> {new}: {v}");
        if !ok {
            assert!(message(&v).contains("server-alias"), "{v}");
        }
    }
}

#[tokio::test]
async fn tenant_status_is_judged_on_the_host() {
    let a = admission();
    let t = |host: &str| {
        json!({"metadata": {"name": "carol", "namespace": "tenant-alice"}, "spec": {"host": host},
               "status": {"ready": true}})
    };
    for (old, new, ok) in [
        ("a.example.org", "a.example.org", true),
        ("a.example.org", "example.org", false),
    ] {
        let r = review_of(
            WebhookResource::Tenants,
            "v1alpha1",
            "status",
            &["tenant-alice-admins"],
            t(old),
            t(new),
        )
        .build();
        let (_, v) = post(&a, WebhookResource::Tenants, &r).await;
        assert_eq!(allowed(&v), ok, "{old} -> {new}: {v}");
    }
}

#[tokio::test]
async fn grpcroutes_and_listenersets_have_paths() {
    let a = admission();
    let mut r = route_review("CREATE", "tenant-alice", &["grpc.bob.example.org"]);
    r["request"]["resource"] =
        json!({"group": "gateway.networking.k8s.io", "version": "v1", "resource": "grpcroutes"});
    r["request"]["kind"]["kind"] = json!("GRPCRoute");
    let (_, v) = post(&a, WebhookResource::GrpcRoutes, &r).await;
    assert!(!allowed(&v), "{v}");
    assert!(message(&v).starts_with("GRPCRoute tenant-alice/web"), "{v}");
    assert!(message(&v).contains("hostnames must equal"), "{v}");
    r["request"]["object"]["spec"]["hostnames"] = json!([]);
    let (_, v) = post(&a, WebhookResource::GrpcRoutes, &r).await;
    assert!(message(&v).contains("spec.hostnames is empty"), "{v}");
    // A GRPCRoute sent to the HTTPRoute path is a misconfiguration.
    let (_, v) = post(&a, WebhookResource::HttpRoutes, &r).await;
    assert!(message(&v).contains("webhook misconfiguration"), "{v}");

    for (group, version, plural, kind) in [
        (
            "gateway.networking.k8s.io",
            "v1",
            "listenersets",
            "ListenerSet",
        ),
        (
            "gateway.networking.x-k8s.io",
            "v1alpha1",
            "xlistenersets",
            "XListenerSet",
        ),
    ] {
        let obj = |host: &str| {
            json!({"apiVersion": format!("{group}/{version}"), "kind": kind,
                   "metadata": {"name": "ls", "namespace": "tenant-alice"},
                   "spec": {"parentRef": {"name": "gw"},
                            "listeners": [{"name": "l", "port": 443, "protocol": "HTTPS", "hostname": host}]}})
        };
        let mut r = review_of(
            WebhookResource::ListenerSets,
            version,
            "",
            &["tenant-alice-admins"],
            Value::Null,
            obj("shop.bob.example.org"),
        )
        .api(group, plural, kind)
        .operation("CREATE")
        .build();
        let (_, v) = post(&a, WebhookResource::ListenerSets, &r).await;
        assert!(!allowed(&v), "{kind}: {v}");
        assert!(
            message(&v).starts_with(&format!("{kind} tenant-alice/ls"))
                && message(&v)
                    .contains("must equal alice.example.org or end with .alice.example.org"),
            "{kind}: {v}"
        );
        r["request"]["object"] = obj("shop.alice.example.org");
        let (_, v) = post(&a, WebhookResource::ListenerSets, &r).await;
        assert!(allowed(&v), "{kind}: {v}");
        // Versions are checked per API resource.
        r["request"]["resource"]["version"] = json!("v1beta9");
        let (_, v) = post(&a, WebhookResource::ListenerSets, &r).await;
        assert!(
            message(&v).contains(plural) && message(&v).contains(version),
            "{v}"
        );
        // The Gateway path does not serve ListenerSets.
        r["request"]["resource"]["version"] = json!(version);
        let (_, v) = post(&a, WebhookResource::Gateways, &r).await;
        assert!(
            message(&v).contains("webhook misconfiguration"),
            "{kind}: {v}"
        );
    }
}

#[tokio::test]
async fn another_namespaces_apex_is_denied_through_the_snapshot_index() {
    let a = admission();
    let mut r = route_review("CREATE", "tenant-alice", &[]);
    r["request"]["resource"] =
        json!({"group": "networking.k8s.io", "version": "v1", "resource": "ingresses"});
    r["request"]["kind"]["kind"] = json!("Ingress");
    for (host, ok) in [
        ("shop.customer1.io", false),
        ("customer1.io", false),
        ("shop.customer9.io", true),
    ] {
        r["request"]["object"] = json!({"metadata": {"name": "web", "namespace": "tenant-alice"},
            "spec": {"rules": [{"host": host}]}});
        let (_, v) = post(&a, WebhookResource::Ingresses, &r).await;
        assert_eq!(allowed(&v), ok, "{host}: {v}");
        if !ok {
            assert!(message(&v).contains("another tenant's namespace"), "{v}");
        }
    }
    // The owner itself may publish there.
    r["request"]["namespace"] = json!("tenant-cust");
    r["request"]["object"] = json!({"metadata": {"name": "web", "namespace": "tenant-cust"},
        "spec": {"rules": [{"host": "shop.customer1.io"}]}});
    let (_, v) = post(&a, WebhookResource::Ingresses, &r).await;
    assert!(allowed(&v), "{v}");
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

#[tokio::test]
async fn apexes_appear_lowercased() {
    let mut ns = StaticNamespaces::default();
    ns.insert(
        "tenant-alice",
        BTreeMap::from([(HOST_LABEL.to_string(), "Alice.Example.ORG".to_string())]),
    );
    let cfg = PolicyConfig {
        root_host: Some("example.org".to_string()),
        ..PolicyConfig::default()
    };
    let a = Admission::new(
        Arc::new(cfg),
        NamespaceSource::Static(Arc::new(ns)),
        Metrics::new(),
    );
    let object = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "web", "namespace": "tenant-alice"},
        "spec": {"hostnames": ["shop.alice.example.org", "shop.bob.example.org"]}});
    let raw = serde_json::value::to_raw_value(&object).expect("raw");
    let request = AdmissionRequest::create_for(
        "u".into(),
        WebhookResource::HttpRoutes,
        "gateway.networking.k8s.io/v1",
        Some("tenant-alice".into()),
        &raw,
        "alice".into(),
        vec![],
    );
    let (d, _) = a.decide(Some(WebhookResource::HttpRoutes), &request).await;
    assert!(!d.allowed, "bob's host is still denied");
    let m = d.message.unwrap_or_default();
    assert!(
        m.contains("(alice.example.org)") && !m.contains("Alice"),
        "{m}"
    );
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

/// alice's `op` of the TenantGateway `gw` in tenant-alice (named by the request: a DELETE
/// has no object).
fn tgw_review(op: &str, groups: &[&str], object: Value, old: Value) -> Value {
    review(WebhookResource::TenantGateways)
        .version("v1alpha1")
        .uid("uid-tgw")
        .name("gw")
        .namespace("tenant-alice")
        .operation(op)
        .user("alice", groups)
        .object(object)
        .old_object(old)
        .build()
}

fn tgw_object(spec: Value) -> Value {
    json!({"apiVersion": "gateway.cozystack.io/v1alpha1", "kind": "TenantGateway",
           "metadata": {"name": "gw", "namespace": "tenant-alice"}, "spec": spec})
}

/// Layer 9 through the codec: DELETE reaches this layer (and only this one), with the deleted
/// object from oldObject; its status subresource is the controller's and passes.
#[tokio::test]
async fn tenant_gateway_writes_and_deletes_need_trust() {
    let a = admission();
    let tenant = ["tenant-alice-admins"];
    let flux = ["system:serviceaccounts:cozy-fluxcd"];
    let ok = tgw_object(json!({"apex": "alice.example.org"}));
    // (operation, groups, object, oldObject, allowed)
    let cases: Vec<(&str, &[&str], Value, Value, bool)> = vec![
        ("CREATE", &tenant, ok.clone(), Value::Null, false),
        ("UPDATE", &tenant, ok.clone(), ok.clone(), false),
        ("DELETE", &tenant, Value::Null, ok.clone(), false),
        ("DELETE", &tenant, Value::Null, Value::Null, false),
        ("CONNECT", &tenant, Value::Null, Value::Null, true),
        ("CREATE", &flux, ok.clone(), Value::Null, true),
        ("DELETE", &flux, Value::Null, ok.clone(), true),
        // Issue 20 item 1: even a trusted writer cannot give a TenantGateway a foreign apex.
        (
            "CREATE",
            &flux,
            tgw_object(json!({"apex": "a", "attachedNamespaces": ["cozy-dashboard"]})),
            Value::Null,
            false,
        ),
    ];
    for (op, groups, object, old, want) in cases {
        let (_, v) = post(
            &a,
            WebhookResource::TenantGateways,
            &tgw_review(op, groups, object.clone(), old),
        )
        .await;
        assert_eq!(allowed(&v), want, "{op} by {groups:?} of {object}: {v}");
        if !want {
            assert!(message(&v).contains("is managed by the platform"), "{v}");
        }
    }
    let mut r = tgw_review("UPDATE", &tenant, ok.clone(), ok.clone());
    r["request"]["subResource"] = json!("status");
    let (_, v) = post(&a, WebhookResource::TenantGateways, &r).await;
    assert!(
        allowed(&v),
        "the status subresource is the controller's: {v}"
    );

    let warn = admission_with(PolicyConfig {
        root_host: Some("example.org".into()),
        enforcement: {
            let mut e = crate::policy::Enforcement::default();
            e.set(Layer::TenantGateway, Mode::Warn);
            e
        },
        ..PolicyConfig::default()
    });
    let (_, v) = post(
        &warn,
        WebhookResource::TenantGateways,
        &tgw_review("DELETE", &tenant, Value::Null, ok),
    )
    .await;
    assert!(allowed(&v), "warn mode admits: {v}");
    assert!(
        v["response"]["warnings"]
            .as_array()
            .is_some_and(|w| !w.is_empty()),
        "{v}"
    );
}

/// Every answer names the request by the uid `uid_and_operation` reads, whichever path
/// answers: the typed decode, a body it refuses, an envelope error; the typed decode takes
/// no envelope or request the scan does not read as an object.
#[tokio::test]
async fn every_answer_names_the_uid_read_one_way() {
    let a = admission();
    for (case, body, uid) in &uid_cases() {
        let reply = a
            .handle(Some(WebhookResource::HttpRoutes), body.as_bytes())
            .await;
        assert_eq!(reply.status, 200, "{case}");
        let v: Value = serde_json::from_slice(&reply.body).expect("reply is JSON");
        assert_eq!(v["response"]["uid"], *uid, "{case}");
        if uid.is_empty() {
            assert!(!allowed(&v), "{case}: no uid, no admission: {v}");
        }
        assert_eq!(
            uid_and_operation(body).0.as_deref().unwrap_or(""),
            uid,
            "{case}: the same uid read from the bytes"
        );
        assert_eq!(
            review_uid(body.as_bytes()).as_deref().unwrap_or(""),
            uid,
            "{case}"
        );
        assert_eq!(
            review_uid_checked(body.as_bytes())
                .expect("JSON")
                .as_deref()
                .unwrap_or(""),
            uid,
            "{case}"
        );
    }
    assert_eq!(
        review_uid(b"{\"request\":{\"uid\":\"\xff\"}}"),
        None,
        "not UTF-8"
    );

    // A request written as an array is refused by the typed decode, which names what it
    // expected.
    let cases = uid_cases();
    let (_, body, _) = cases
        .iter()
        .find(|(case, _, _)| *case == "request an array")
        .expect("the array case");
    let reply = a
        .handle(Some(WebhookResource::HttpRoutes), body.as_bytes())
        .await;
    let v: Value = serde_json::from_slice(&reply.body).expect("reply is JSON");
    assert!(
        message(&v).starts_with(
            "not a usable AdmissionReview: invalid type: sequence, expected struct AdmissionRequest"
        ),
        "{v}"
    );
}

/// One `review` span per review: the resource and body size when it opens, the uid once
/// the envelope is decoded; the events of the decision are inside it.
///
/// The check runs in a child process of this test binary, alone. tracing caches each
/// callsite's interest process-wide: a test on another thread that reaches one of these
/// callsites first computes its interest without our scoped subscriber and can store
/// "never" after our subscriber registered, so the events were lost now and then under
/// the parallel test runner (CI, stop 34).
#[test]
fn one_review_span_carries_resource_bytes_and_uid() {
    const CHILD: &str = "TENANT_GATEWAY_ALONE_IN_PROCESS";
    let name = concat!(
        module_path!(),
        "::one_review_span_carries_resource_bytes_and_uid"
    );
    let name = name.split_once("::").map_or(name, |(_, rest)| rest);
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(review_span_alone());
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test:\n{stdout}"
    );
}

async fn review_span_alone() {
    use std::sync::Mutex;
    use tracing_subscriber::fmt::format::FmtSpan;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let a = admission();
    let body = serde_json::to_vec(&route_review(
        "CREATE",
        "tenant-alice",
        &["shop.bob.example.org"],
    ))
    .expect("json");
    let reply = a.handle(Some(WebhookResource::HttpRoutes), &body).await;
    let v: Value = serde_json::from_slice(&reply.body).expect("json");
    assert!(!allowed(&v), "{v}");

    let text = String::from_utf8(lines.0.lock().expect("lock").clone()).expect("utf-8");
    let span = format!(
        "review{{resource=\"httproutes\" bytes={} uid=uid-1}}",
        body.len()
    );
    let denied = text
        .lines()
        .find(|l| l.contains("admission denied"))
        .unwrap_or_else(|| panic!("no denial logged: {text}"));
    assert!(denied.contains(&span), "{denied}");
    assert_eq!(denied.matches("review{").count(), 1, "one span: {denied}");
    let closed: Vec<&str> = text.lines().filter(|l| l.contains(" close")).collect();
    assert_eq!(closed.len(), 1, "{text}");
    assert!(closed[0].contains(&span), "{text}");
}
